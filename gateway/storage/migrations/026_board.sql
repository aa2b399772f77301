-- The task board (gateway.board): a backlog the agent works through, each task run as a goal in a session of its
-- own (`task:<id>`). A task is `todo` while a parent is not done, `ready` when they all are, `running` while an
-- instance runs it (`runner`, its heartbeat `beat_at`), `blocked` while it waits on a person (`question`, or
-- `reason`: its runs failed `board.max_attempts` times), `done` with its `result`, `archived` when cancelled.
CREATE TABLE board_tasks (
    id          INTEGER PRIMARY KEY,
    title       TEXT NOT NULL,
    body        TEXT NOT NULL DEFAULT '',
    status      TEXT NOT NULL,           -- todo | ready | running | blocked | done | archived
    owner       TEXT,                    -- JSON [platform, user id] of who added it; NULL: the operator
    origin      TEXT,                    -- JSON {platform, chat_id, thread_id}: the chat it reports to; NULL: none
    created_by  INTEGER,                 -- the task whose run made it (the agent's board tool); NULL: a person
    priority    INTEGER NOT NULL DEFAULT 0,
    attempts    INTEGER NOT NULL DEFAULT 0,  -- runs started
    result      TEXT,                    -- the goal's final answer
    question    TEXT,                    -- what it asks while blocked on a person
    reason      TEXT,                    -- why it is blocked when nobody asked anything (its runs kept failing)
    runner      TEXT,                    -- the instance running it (gateway_instances.id)
    beat_at     REAL,                    -- its run's latest heartbeat (seconds since the epoch)
    not_before  REAL,                    -- a failed run's backoff: not run again before this
    created_at  REAL NOT NULL,
    updated_at  REAL NOT NULL,
    done_at     REAL
);
CREATE INDEX board_tasks_status ON board_tasks (status, priority, id);
CREATE INDEX board_tasks_updated ON board_tasks (updated_at);
-- A task waits for each of its parents to be done.
CREATE TABLE board_parents (
    task_id   INTEGER NOT NULL REFERENCES board_tasks (id) ON DELETE CASCADE,
    parent_id INTEGER NOT NULL REFERENCES board_tasks (id) ON DELETE CASCADE,
    PRIMARY KEY (task_id, parent_id)
);
CREATE INDEX board_parents_parent ON board_parents (parent_id);
-- What happened to a task, in order: added, started, blocked, answered, comment, done, failed, reclaimed, ...
-- A comment (a person's, or an answer to its question) is read by the task's next turn.
CREATE TABLE board_events (
    id      INTEGER PRIMARY KEY,
    task_id INTEGER NOT NULL REFERENCES board_tasks (id) ON DELETE CASCADE,
    at      REAL NOT NULL,
    kind    TEXT NOT NULL,
    author  TEXT,                        -- who: "platform:user", "operator", "agent", or an instance
    text    TEXT NOT NULL DEFAULT ''
);
CREATE INDEX board_events_task ON board_events (task_id, id);
