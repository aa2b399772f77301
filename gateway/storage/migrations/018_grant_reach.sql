-- Where an unconfined command's words lead is part of what a person allows: each request, session
-- grant and "always allow" rule records `reach`, a digest of where the command's words led (links and
-- `..` followed) and of the workspace code it ran, when it was shown. A grant to run a command outside
-- the sandbox covers it only while that is the same: a folder swapped for a link to chatgate's state
-- since makes it ask again. ('' for a sandboxed command or anything but a command: there it does not
-- matter where paths lead.)
--
-- Before this, nothing recorded where a command's paths led when it was allowed, so an old grant or
-- rule to run a command unconfined cannot be bound to it: it keeps covering the command inside the
-- sandbox, and outside it the command is asked again (once, for a new rule).

ALTER TABLE approvals ADD COLUMN reach TEXT NOT NULL DEFAULT '';

CREATE TABLE approval_rules_reach (
    id            INTEGER PRIMARY KEY,
    kind          TEXT NOT NULL,
    subject       TEXT NOT NULL,               -- as shown: secrets redacted
    subject_hash  TEXT NOT NULL,
    confinement   TEXT NOT NULL DEFAULT '',    -- sandbox | unconfined | '' (not a command)
    reach         TEXT NOT NULL DEFAULT '',    -- unconfined: where its words led when it was allowed
    scope         TEXT NOT NULL DEFAULT 'global',  -- user | chat | global
    platform      TEXT NOT NULL DEFAULT '',
    chat_id       TEXT NOT NULL DEFAULT '',        -- scope chat
    user_id       TEXT NOT NULL DEFAULT '',        -- scope user
    created_by    TEXT NOT NULL,
    created_at    REAL NOT NULL,
    UNIQUE (kind, subject_hash, confinement, reach, scope, platform, chat_id, user_id)
);
INSERT INTO approval_rules_reach (id, kind, subject, subject_hash, confinement, scope, platform, chat_id, user_id,
                                  created_by, created_at)
    SELECT id, kind, subject, subject_hash, confinement, scope, platform, chat_id, user_id, created_by, created_at
    FROM approval_rules;
DROP TABLE approval_rules;
ALTER TABLE approval_rules_reach RENAME TO approval_rules;
-- (the old table's index went with it)
CREATE INDEX approval_rules_by_subject ON approval_rules(kind, subject_hash);
