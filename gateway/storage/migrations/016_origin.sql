-- What an inbox row is: a person's message ('person') or the next turn of a goal ('goal', with the goal and
-- the turn's number). A goal turn keeps its message id 'goal:<id>:<seq>' (what makes it unique in its chat);
-- nothing reads meaning from that id any more.

ALTER TABLE inbox ADD COLUMN origin TEXT NOT NULL DEFAULT 'person';  -- person | goal
ALTER TABLE inbox ADD COLUMN goal_id INTEGER;                        -- origin 'goal': its goal
ALTER TABLE inbox ADD COLUMN goal_seq INTEGER;                       -- origin 'goal': which of its turns

UPDATE inbox SET origin = 'goal',
    goal_id = CAST(substr(platform_message_id, 6, instr(substr(platform_message_id, 6), ':') - 1) AS INTEGER),
    goal_seq = CAST(substr(substr(platform_message_id, 6), instr(substr(platform_message_id, 6), ':') + 1) AS INTEGER)
WHERE platform_message_id LIKE 'goal:%:%' AND EXISTS (SELECT 1 FROM goals g WHERE g.session_key = inbox.session_key
    AND 'goal:' || g.id || ':' = substr(platform_message_id, 1, length('goal:' || g.id || ':')));

CREATE INDEX inbox_goal_turn ON inbox (goal_id, goal_seq) WHERE goal_id IS NOT NULL;
