-- A scheduled job may name the model its runs use (NULL: the main model).

ALTER TABLE cron_jobs ADD COLUMN model TEXT;
