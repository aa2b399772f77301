-- SQLite's 025_documents.sql (see there), in PostgreSQL's types. Names compare by code point (COLLATE "C"), as
-- Python and SQLite compare them.
CREATE TABLE documents (
    name       TEXT COLLATE "C" PRIMARY KEY,
    body       TEXT NOT NULL,
    updated_at DOUBLE PRECISION NOT NULL  -- seconds since the epoch
);
CREATE TABLE document_changes (
    id      INTEGER PRIMARY KEY CHECK (id = 1),
    changes BIGINT NOT NULL
);
