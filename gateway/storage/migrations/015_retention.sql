-- Retention: token usage older than `gateway.retention_days` is kept as sums per UTC day (one row per day,
-- loop, session, person and model; `/usage` and `chatgate usage` add them to the rows of each request), and
-- the indexes the pruning in the tick looks things up by.

CREATE TABLE llm_usage_daily (
    id                INTEGER PRIMARY KEY,
    day               TEXT NOT NULL,              -- UTC date, YYYY-MM-DD
    loop              TEXT NOT NULL,
    session_id        INTEGER,
    platform          TEXT NOT NULL DEFAULT '',
    user_id           TEXT NOT NULL DEFAULT '',
    model             TEXT NOT NULL,
    requests          INTEGER NOT NULL,
    prompt_tokens     INTEGER NOT NULL,
    completion_tokens INTEGER NOT NULL
);
CREATE INDEX llm_usage_daily_day ON llm_usage_daily (day);
CREATE INDEX llm_usage_daily_session ON llm_usage_daily (session_id);
CREATE INDEX llm_usage_daily_person ON llm_usage_daily (platform, user_id, day);

CREATE INDEX approval_events_by_approval ON approval_events (approval_id);
CREATE INDEX sessions_ended ON sessions (ended_at) WHERE ended_at IS NOT NULL;
CREATE INDEX sessions_by_key ON sessions (key);
CREATE INDEX subagent_runs_ended ON subagent_runs (ended_at) WHERE state != 'running';
CREATE INDEX subagent_runs_session ON subagent_runs (session_id);
