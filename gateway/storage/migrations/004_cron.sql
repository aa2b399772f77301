-- Scheduled jobs, their run ledger (one row per job and scheduled time), and the gateway
-- processes that claim runs (so a run whose process died is known to be interrupted).

CREATE TABLE cron_jobs (
    id               INTEGER PRIMARY KEY,
    name             TEXT NOT NULL,
    prompt           TEXT NOT NULL,
    schedule         TEXT NOT NULL,            -- normalised expression: every 30m | cron ... | at <ISO time>
    timezone         TEXT NOT NULL,            -- IANA zone the schedule is read in
    target           TEXT NOT NULL,            -- platform:chat[:thread] or none
    owner_platform   TEXT NOT NULL,
    owner_id         TEXT NOT NULL,
    owner_chat       TEXT,                     -- platform:chat[:thread] the job was created from (approvals go there)
    owner_key        TEXT,                     -- session key of that chat, for yes/no answers
    enabled          INTEGER NOT NULL DEFAULT 1,
    missed_policy    TEXT NOT NULL DEFAULT 'run_once',  -- run_once | skip
    next_run_at      REAL,                     -- NULL: nothing left to run (a one-shot that ran)
    last_run_at      REAL,
    last_status      TEXT,
    last_error       TEXT,
    created_at       REAL NOT NULL,
    updated_at       REAL NOT NULL
);
CREATE INDEX cron_jobs_due ON cron_jobs(next_run_at) WHERE enabled = 1 AND next_run_at IS NOT NULL;
CREATE INDEX cron_jobs_owner ON cron_jobs(owner_platform, owner_id);

CREATE TABLE cron_runs (
    id            INTEGER PRIMARY KEY,
    job_id        INTEGER NOT NULL,
    scheduled_at  REAL NOT NULL,
    manual        INTEGER NOT NULL DEFAULT 0,   -- 1: "run now", not a slot of the schedule
    state         TEXT NOT NULL,   -- queued | running | ok | silent | error | skipped | missed | interrupted
    claimed_by    TEXT,            -- gateway_instances.id
    started_at    REAL,
    finished_at   REAL,
    output        TEXT,
    error         TEXT,
    outbox_id     INTEGER,         -- the delivered message; its platform ids are in the outbox row
    UNIQUE (job_id, scheduled_at, manual)
);
CREATE INDEX cron_runs_by_job ON cron_runs(job_id, scheduled_at);
CREATE INDEX cron_runs_open ON cron_runs(state) WHERE state IN ('queued', 'running');

CREATE TABLE gateway_instances (
    id          TEXT PRIMARY KEY,
    host        TEXT NOT NULL,
    pid         INTEGER NOT NULL,
    started_at  REAL NOT NULL,
    seen_at     REAL NOT NULL
);
