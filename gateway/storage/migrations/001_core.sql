-- Sessions, transcripts with full-text search, and the inbox/outbox that make delivery durable.

CREATE TABLE sessions (
    id          INTEGER PRIMARY KEY,
    key         TEXT NOT NULL,
    platform    TEXT NOT NULL,
    chat_id     TEXT NOT NULL,
    thread_id   TEXT,
    chat_type   TEXT NOT NULL,
    created_at  REAL NOT NULL,
    updated_at  REAL NOT NULL,
    ended_at    REAL
);
CREATE UNIQUE INDEX sessions_active_key ON sessions(key) WHERE ended_at IS NULL;

CREATE TABLE messages (
    id            INTEGER PRIMARY KEY,
    session_id    INTEGER NOT NULL REFERENCES sessions(id),
    inbox_id      INTEGER,
    role          TEXT NOT NULL,          -- user | assistant | tool
    content       TEXT NOT NULL DEFAULT '',
    tool_calls    TEXT,                   -- JSON, assistant messages that call tools
    tool_call_id  TEXT,
    name          TEXT,
    platform      TEXT,                   -- author of a user message
    user_id       TEXT,
    status        TEXT NOT NULL DEFAULT 'ok',  -- ok | cancelled
    created_at    REAL NOT NULL
);
CREATE INDEX messages_by_session ON messages(session_id, id);
CREATE INDEX messages_by_author ON messages(platform, user_id, session_id);

CREATE VIRTUAL TABLE messages_fts USING fts5(content, content='messages', content_rowid='id');
CREATE TRIGGER messages_fts_insert AFTER INSERT ON messages BEGIN
    INSERT INTO messages_fts(rowid, content) VALUES (new.id, new.content);
END;
CREATE TRIGGER messages_fts_delete AFTER DELETE ON messages BEGIN
    INSERT INTO messages_fts(messages_fts, rowid, content) VALUES ('delete', old.id, old.content);
END;
CREATE TRIGGER messages_fts_update AFTER UPDATE OF content ON messages BEGIN
    INSERT INTO messages_fts(messages_fts, rowid, content) VALUES ('delete', old.id, old.content);
    INSERT INTO messages_fts(rowid, content) VALUES (new.id, new.content);
END;

CREATE TABLE inbox (
    id                   INTEGER PRIMARY KEY,
    platform             TEXT NOT NULL,
    chat_id              TEXT NOT NULL,
    platform_message_id  TEXT NOT NULL,
    session_key          TEXT NOT NULL,
    payload              TEXT NOT NULL,    -- JSON of the InboundMessage
    state                TEXT NOT NULL DEFAULT 'received',  -- received | processing | done | cancelled
    received_at          REAL NOT NULL,
    updated_at           REAL NOT NULL,
    UNIQUE (platform, chat_id, platform_message_id)
);
CREATE INDEX inbox_unfinished ON inbox(id) WHERE state IN ('received', 'processing');

CREATE TABLE outbox (
    id                    INTEGER PRIMARY KEY,
    platform              TEXT NOT NULL,
    chat_id               TEXT NOT NULL,
    thread_id             TEXT,
    inbox_id              INTEGER,
    payload               TEXT NOT NULL,   -- JSON: text, buttons, reply_to, draft_message_id
    state                 TEXT NOT NULL DEFAULT 'pending',  -- pending | sent | failed
    attempts              INTEGER NOT NULL DEFAULT 0,
    platform_message_ids  TEXT NOT NULL DEFAULT '[]',  -- JSON list, grows part by part
    error                 TEXT,
    created_at            REAL NOT NULL,
    sent_at               REAL
);
CREATE INDEX outbox_pending ON outbox(id) WHERE state = 'pending';
