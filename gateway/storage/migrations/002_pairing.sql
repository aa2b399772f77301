-- Pairing: unknown users in a DM get a code; `chatgate pair approve` admits them.

CREATE TABLE pairing_codes (
    code          TEXT PRIMARY KEY,
    platform      TEXT NOT NULL,
    user_id       TEXT NOT NULL,
    user_name     TEXT NOT NULL DEFAULT '',
    chat_id       TEXT NOT NULL,
    created_at    REAL NOT NULL,
    expires_at    REAL NOT NULL,
    last_sent_at  REAL NOT NULL
);
CREATE INDEX pairing_codes_user ON pairing_codes(platform, user_id);

CREATE TABLE paired_users (
    platform     TEXT NOT NULL,
    user_id      TEXT NOT NULL,
    user_name    TEXT NOT NULL DEFAULT '',
    approved_at  REAL NOT NULL,
    PRIMARY KEY (platform, user_id)
);
