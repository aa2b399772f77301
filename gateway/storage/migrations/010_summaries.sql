-- Context compression: a session's summary of its messages up to `through_message_id`. The
-- transcript itself is kept whole (and searchable); the model is sent the session's first user
-- message, the latest summary and what came after it.

CREATE TABLE session_summaries (
    id                 INTEGER PRIMARY KEY,
    session_id         INTEGER NOT NULL REFERENCES sessions (id),
    through_message_id INTEGER NOT NULL,
    summary            TEXT NOT NULL,
    created_at         REAL NOT NULL
);
CREATE INDEX session_summaries_session ON session_summaries (session_id, id);
