-- Who holds each connection that must be single (Telegram's long poll, Discord's gateway, Slack's
-- Socket Mode) while several instances share one database: one row per platform, taken when free,
-- expired or already the taker's, renewed while held, deleted at stop (gateway.storage.leases).
CREATE TABLE platform_leases (
    platform TEXT PRIMARY KEY,
    holder   TEXT NOT NULL,     -- gateway_instances.id of the holder
    until    REAL NOT NULL      -- seconds since the epoch, by the database's clock: free after it
);
