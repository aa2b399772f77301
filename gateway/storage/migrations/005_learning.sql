-- Learning: each session's frozen prompt block, review counters, skills' provenance and usage,
-- curator runs, and small facts about the gateway itself.

ALTER TABLE sessions ADD COLUMN prompt TEXT;   -- memory snapshot + skill index, fixed when the session starts

CREATE TABLE review_counters (
    session_id          INTEGER PRIMARY KEY,
    turns_since_memory  INTEGER NOT NULL DEFAULT 0,   -- user turns since the last memory review
    iters_since_skill   INTEGER NOT NULL DEFAULT 0,   -- tool iterations since the last skill review
    updated_at          REAL NOT NULL
);

CREATE TABLE skills (
    name          TEXT PRIMARY KEY,
    provenance    TEXT NOT NULL,                    -- user | agent | review | bundled (who created it)
    updated_by    TEXT NOT NULL,
    created_at    REAL NOT NULL,
    updated_at    REAL NOT NULL,
    views         INTEGER NOT NULL DEFAULT 0,
    last_used_at  REAL,
    pinned        INTEGER NOT NULL DEFAULT 0,
    state         TEXT NOT NULL DEFAULT 'active'   -- active | stale | archived
);

CREATE TABLE curator_runs (
    id           TEXT PRIMARY KEY,                  -- also the folder under logs/curator/
    started_at   REAL NOT NULL,
    finished_at  REAL,
    dry_run      INTEGER NOT NULL DEFAULT 0,
    trigger      TEXT NOT NULL,                     -- tick | cli
    changes      TEXT,                              -- JSON list of {skill, from, to}
    error        TEXT
);

CREATE TABLE gateway_facts (
    key    TEXT PRIMARY KEY,                        -- e.g. first_started_at
    value  TEXT NOT NULL
);
