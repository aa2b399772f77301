-- SQLite's 023_conversation_owners.sql (see there), in PostgreSQL's types.
-- Several instances on one database: which instance runs each conversation (gateway.storage.owners). An
-- instance runs a conversation's messages only while it owns it; it owns it until nothing of it is left
-- unfinished, or until its life lease (`instance_leases`, renewed every few seconds) ends — then another
-- instance takes the conversation over, with what its owner left unfinished.
CREATE TABLE conversation_owners (
    session_key TEXT PRIMARY KEY,
    holder      TEXT NOT NULL,  -- instance_leases.holder
    since       DOUBLE PRECISION NOT NULL  -- seconds since the epoch, by the database's clock
);
CREATE INDEX conversation_owners_holder ON conversation_owners (holder);
CREATE TABLE instance_leases (
    holder TEXT PRIMARY KEY,    -- gateway_instances.id
    until  DOUBLE PRECISION NOT NULL  -- by the database's clock: the instance counts as dead after it
);
