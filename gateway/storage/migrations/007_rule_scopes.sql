-- "Always allow" rules get a scope: one person (user), one chat, or everyone (global). Rules
-- made before scopes existed applied everywhere, so they stay global.

CREATE TABLE approval_rules_scoped (
    id            INTEGER PRIMARY KEY,
    kind          TEXT NOT NULL,
    subject       TEXT NOT NULL,               -- as shown: secrets redacted
    subject_hash  TEXT NOT NULL,
    scope         TEXT NOT NULL DEFAULT 'global',  -- user | chat | global
    platform      TEXT NOT NULL DEFAULT '',
    chat_id       TEXT NOT NULL DEFAULT '',        -- scope chat
    user_id       TEXT NOT NULL DEFAULT '',        -- scope user
    created_by    TEXT NOT NULL,
    created_at    REAL NOT NULL,
    UNIQUE (kind, subject_hash, scope, platform, chat_id, user_id)
);
INSERT INTO approval_rules_scoped (id, kind, subject, subject_hash, created_by, created_at)
    SELECT id, kind, subject, subject_hash, created_by, created_at FROM approval_rules;
DROP TABLE approval_rules;
ALTER TABLE approval_rules_scoped RENAME TO approval_rules;
CREATE INDEX approval_rules_by_hash ON approval_rules(kind, subject_hash);
