-- /goal: an objective the agent keeps working toward across turns, judged after each one.
-- A goal's turns are inbox rows with the message id 'goal:<id>:<seq>'; `seq` is the latest such row,
-- `judged` the latest one the judge (or an interruption) has dealt with. A goal whose latest row is
-- finished but not judged is judged at the next start: a goal in progress survives a restart.

CREATE TABLE goals (
    id          INTEGER PRIMARY KEY,
    session_key TEXT NOT NULL,
    origin      TEXT NOT NULL,             -- the /goal message (JSON): where its turns come from and go
    objective   TEXT NOT NULL,
    criteria    TEXT NOT NULL DEFAULT '[]', -- JSON list, added with /subgoal
    state       TEXT NOT NULL,             -- active | paused | done | exhausted | cleared
    turns       INTEGER NOT NULL DEFAULT 0, -- turns spent on it so far
    max_turns   INTEGER NOT NULL,
    seq         INTEGER NOT NULL DEFAULT 0,
    judged      INTEGER NOT NULL DEFAULT 0,
    reason      TEXT,                      -- the judge's latest reason, or why it stopped
    created_at  REAL NOT NULL,
    updated_at  REAL NOT NULL
);
CREATE INDEX goals_session ON goals (session_key, state);
CREATE UNIQUE INDEX goals_one_open ON goals (session_key) WHERE state IN ('active', 'paused', 'exhausted');
