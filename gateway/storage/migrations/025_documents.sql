-- Several instances on one database: the agent's memory and skills as documents (gateway.storage.documents), so
-- that what one instance writes is what every other reads next. A document's name is the path its file has in a
-- home (`memory/MEMORY.md`, `skills/<name>/SKILL.md`); on SQLite (one daemon) they stay files in the home and
-- these tables are empty.
CREATE TABLE documents (
    name       TEXT PRIMARY KEY,
    body       TEXT NOT NULL,
    updated_at REAL NOT NULL  -- seconds since the epoch
);
-- One row, bumped in the transaction of every change to `documents` (written first: document writers queue on
-- it, one after the other): a cache of what the documents hold (the skill index) is fresh while it is the same.
CREATE TABLE document_changes (
    id      INTEGER PRIMARY KEY CHECK (id = 1),
    changes INTEGER NOT NULL
);
