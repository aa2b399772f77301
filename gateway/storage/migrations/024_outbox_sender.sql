-- Several instances on one database: the instance that sends a reply. Written with the reply (PostgreSQL: the
-- connection's instance, by default), so that another instance flushing the chat leaves it to that one while it
-- lives, and takes it over (a claim: gateway.storage.outbox) once its life lease has ended. NULL: any instance.
ALTER TABLE outbox ADD COLUMN sender TEXT;
