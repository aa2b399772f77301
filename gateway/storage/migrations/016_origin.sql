-- What an inbox row is: a person's message ('person') or the next turn of a goal ('goal', with the goal and
-- the turn's number). A person's message is unique by its platform's id in its chat; a goal's turn by its
-- goal and number. Before, a goal's turn was a row with the message id 'goal:<id>:<seq>', in the same space
-- as the ids a web chat page gives its own messages: one could stand in for the other. The table is rebuilt
-- (SQLite cannot change a table's UNIQUE constraint); old goal turns are recognised by that id once, here:
-- exactly the id the goal gave its turn, in the goal's own chat ('goal:1:03', which a page could send beside
-- the real 'goal:1:3', stays a person's message: read as the same turn, it broke the unique index below).

CREATE TABLE inbox_new (
    id                   INTEGER PRIMARY KEY,
    platform             TEXT NOT NULL,
    chat_id              TEXT NOT NULL,
    platform_message_id  TEXT NOT NULL,
    session_key          TEXT NOT NULL,
    payload              TEXT NOT NULL,    -- JSON of the InboundMessage
    state                TEXT NOT NULL DEFAULT 'received',
    received_at          REAL NOT NULL,
    updated_at           REAL NOT NULL,
    draft_message_id     TEXT,
    effects              TEXT,
    error                TEXT,
    origin               TEXT NOT NULL DEFAULT 'person',  -- person | goal
    goal_id              INTEGER,                         -- origin 'goal': its goal
    goal_seq             INTEGER                          -- origin 'goal': which of its turns
);

INSERT INTO inbox_new (id, platform, chat_id, platform_message_id, session_key, payload, state, received_at,
                       updated_at, draft_message_id, effects, error)
SELECT id, platform, chat_id, platform_message_id, session_key, payload, state, received_at, updated_at,
       draft_message_id, effects, error FROM inbox;

UPDATE inbox_new SET origin = 'goal',
    goal_id = CAST(substr(platform_message_id, 6, instr(substr(platform_message_id, 6), ':') - 1) AS INTEGER),
    goal_seq = CAST(substr(substr(platform_message_id, 6), instr(substr(platform_message_id, 6), ':') + 1) AS INTEGER)
WHERE platform_message_id LIKE 'goal:%:%' AND EXISTS (SELECT 1 FROM goals g WHERE g.session_key = inbox_new.session_key
    AND json_extract(g.origin, '$.platform') = inbox_new.platform
    AND json_extract(g.origin, '$.chat_id') = inbox_new.chat_id
    AND platform_message_id = 'goal:' || g.id || ':' ||
        CAST(CAST(substr(platform_message_id, length('goal:' || g.id || ':') + 1) AS INTEGER) AS TEXT));

DROP TABLE inbox;
ALTER TABLE inbox_new RENAME TO inbox;

CREATE INDEX inbox_unfinished ON inbox (id) WHERE state IN ('received', 'processing');
CREATE UNIQUE INDEX inbox_message ON inbox (platform, chat_id, platform_message_id) WHERE origin = 'person';
CREATE UNIQUE INDEX inbox_goal_turn ON inbox (goal_id, goal_seq) WHERE origin = 'goal';
