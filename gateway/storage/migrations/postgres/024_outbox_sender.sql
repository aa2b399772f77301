-- SQLite's 024_outbox_sender.sql (see there); here the sender is, by default, the instance whose connection
-- writes the reply (`chatgate.instance`, set when chatgate connects; NULL for the CLI's).
ALTER TABLE outbox ADD COLUMN sender TEXT DEFAULT current_setting('chatgate.instance', true);
