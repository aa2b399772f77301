-- Subagents: each child a `delegate_task` call starts, linked to the parent's session and turn (its
-- inbox row), with its own transcript in a session of its own (key 'subagent:<run id>').

CREATE TABLE subagent_runs (
    id                INTEGER PRIMARY KEY,
    parent_session_id INTEGER REFERENCES sessions (id),
    parent_inbox_id   INTEGER,
    session_id        INTEGER REFERENCES sessions (id),
    depth             INTEGER NOT NULL,
    task              TEXT NOT NULL,
    state             TEXT NOT NULL,  -- running | done | stopped | failed | cancelled
    summary           TEXT,
    started_at        REAL NOT NULL,
    ended_at          REAL
);
CREATE INDEX subagent_runs_parent ON subagent_runs (parent_session_id);
