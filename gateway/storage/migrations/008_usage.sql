-- Token usage per LLM request, as the endpoint reports it: which loop asked (main, review,
-- curator, cron), for which session and person, with which model.

CREATE TABLE llm_usage (
    id                INTEGER PRIMARY KEY,
    at                REAL NOT NULL,
    loop              TEXT NOT NULL,
    session_id        INTEGER,
    platform          TEXT NOT NULL DEFAULT '',
    user_id           TEXT NOT NULL DEFAULT '',
    model             TEXT NOT NULL,
    prompt_tokens     INTEGER NOT NULL,
    completion_tokens INTEGER NOT NULL
);
CREATE INDEX llm_usage_session ON llm_usage (session_id);
CREATE INDEX llm_usage_person ON llm_usage (platform, user_id, at);
CREATE INDEX llm_usage_at ON llm_usage (at);
