-- Approvals: one row per request for consent, its audit trail, and "always allow" rules.

CREATE TABLE approvals (
    id                 TEXT PRIMARY KEY,        -- unguessable; also the button data
    session_key        TEXT NOT NULL,
    session_id         INTEGER,
    platform           TEXT NOT NULL,
    chat_id            TEXT NOT NULL,
    thread_id          TEXT,
    requester_id       TEXT NOT NULL,
    kind               TEXT NOT NULL,           -- command | file
    subject            TEXT NOT NULL,           -- as shown: secrets redacted
    subject_hash       TEXT NOT NULL,           -- of the real subject, for rules and session grants
    reasons            TEXT NOT NULL,           -- JSON list
    state              TEXT NOT NULL DEFAULT 'pending',  -- pending | once | session | always | denied | expired | cancelled
    decided_by         TEXT,
    decided_at         REAL,
    note               TEXT,
    prompt_message_id  TEXT,
    created_at         REAL NOT NULL,
    expires_at         REAL NOT NULL
);
CREATE INDEX approvals_pending ON approvals(id) WHERE state = 'pending';
CREATE INDEX approvals_session_grants ON approvals(session_id, subject_hash) WHERE state = 'session';

CREATE TABLE approval_events (
    id           INTEGER PRIMARY KEY,
    approval_id  TEXT NOT NULL,
    event        TEXT NOT NULL,
    actor        TEXT,
    detail       TEXT,
    at           REAL NOT NULL
);

CREATE TABLE approval_rules (
    id            INTEGER PRIMARY KEY,
    kind          TEXT NOT NULL,
    subject       TEXT NOT NULL,               -- as shown: secrets redacted
    subject_hash  TEXT NOT NULL,
    created_by    TEXT NOT NULL,
    created_at    REAL NOT NULL,
    UNIQUE (kind, subject_hash)
);
