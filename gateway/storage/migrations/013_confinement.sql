-- Where a command runs is part of what a person allows: each request, session grant and "always
-- allow" rule records its confinement — 'sandbox' (inside bubblewrap), 'unconfined' (with
-- chatgate's own rights: outside_sandbox, or no sandbox at all), '' (not a command). A grant made
-- for 'sandbox' never lets the same command run unconfined; one made for 'unconfined' also covers
-- it inside the sandbox.
--
-- Before this, prompts did not say where a command would run, so an old grant counts as consent to
-- run unconfined only when its prompt said so in its reasons ("runs OUTSIDE the sandbox", "... with
-- no sandbox around it"); every other old command grant now covers only sandboxed runs (without a
-- sandbox, the command is asked again, once, with a prompt that says where it runs).

-- A reason counts only as a whole: one that starts as the gateway's own did. (A classifier's finding
-- quotes the command, so "runs OUTSIDE the sandbox" anywhere in the text could be the model's words.)
ALTER TABLE approvals ADD COLUMN confinement TEXT NOT NULL DEFAULT '';
UPDATE approvals SET confinement = CASE
        WHEN NOT json_valid(approvals.reasons) THEN 'sandbox'
        WHEN EXISTS (SELECT 1 FROM json_each(approvals.reasons) WHERE value LIKE 'runs OUTSIDE the sandbox:%'
                     OR value LIKE 'runs code from the workspace (%) with no sandbox around it'
                     OR value LIKE 'reaches % (chatgate''s own state) with no sandbox around it')
        THEN 'unconfined' ELSE 'sandbox' END
    WHERE kind = 'command';

CREATE TABLE approval_rules_confined (
    id            INTEGER PRIMARY KEY,
    kind          TEXT NOT NULL,
    subject       TEXT NOT NULL,               -- as shown: secrets redacted
    subject_hash  TEXT NOT NULL,
    confinement   TEXT NOT NULL DEFAULT '',    -- sandbox | unconfined | '' (not a command)
    scope         TEXT NOT NULL DEFAULT 'global',  -- user | chat | global
    platform      TEXT NOT NULL DEFAULT '',
    chat_id       TEXT NOT NULL DEFAULT '',        -- scope chat
    user_id       TEXT NOT NULL DEFAULT '',        -- scope user
    created_by    TEXT NOT NULL,
    created_at    REAL NOT NULL,
    UNIQUE (kind, subject_hash, confinement, scope, platform, chat_id, user_id)
);
-- A rule is 'unconfined' only when the request it was made from (same kind, hash, decider and
-- moment: the rule is written in the same step as the decision) was.
INSERT INTO approval_rules_confined (id, kind, subject, subject_hash, confinement, scope, platform, chat_id,
                                     user_id, created_by, created_at)
    SELECT r.id, r.kind, r.subject, r.subject_hash,
           CASE WHEN r.kind != 'command' THEN ''
                WHEN EXISTS (SELECT 1 FROM approvals a WHERE a.state = 'always' AND a.kind = r.kind
                             AND a.subject_hash = r.subject_hash AND a.decided_at = r.created_at
                             AND a.decided_by = r.created_by AND a.confinement = 'unconfined')
                THEN 'unconfined' ELSE 'sandbox' END,
           r.scope, r.platform, r.chat_id, r.user_id, r.created_by, r.created_at
    FROM approval_rules r;
DROP TABLE approval_rules;
ALTER TABLE approval_rules_confined RENAME TO approval_rules;
CREATE INDEX approval_rules_by_hash ON approval_rules(kind, subject_hash);
