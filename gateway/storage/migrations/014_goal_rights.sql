-- Goals in shared conversations: who shaped a goal, and how often each person gave goals more turns.
-- `people`: whoever added a criterion (JSON [[platform, user id], ...]; the creator is the `origin`'s author); a
-- goal's turn acts for the least trusted of them, the creator and everyone whose messages are in its session
-- (gateway/access/trust.py).
ALTER TABLE goals ADD COLUMN people TEXT NOT NULL DEFAULT '[]';

-- Each `/goal resume` that gave a goal more turns, for `goals.max_resumes_per_day` (rows older than a day
-- are deleted as new ones are added).
CREATE TABLE goal_resumes (
    id        INTEGER PRIMARY KEY,
    goal_id   INTEGER NOT NULL,
    platform  TEXT NOT NULL,
    user_id   TEXT NOT NULL,
    at        REAL NOT NULL
);
CREATE INDEX goal_resumes_by_person ON goal_resumes (platform, user_id, at);
