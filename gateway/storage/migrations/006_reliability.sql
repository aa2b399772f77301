-- What a turn already did (so a re-run after a crash neither repeats side effects nor adds a
-- second message), and input that could not be taken (the dead-letter table).

ALTER TABLE inbox ADD COLUMN draft_message_id TEXT;  -- the first message sent for this turn (the streaming preview)
ALTER TABLE inbox ADD COLUMN effects TEXT;           -- JSON list: side-effecting tool calls started, in order
ALTER TABLE inbox ADD COLUMN error TEXT;             -- why the turn failed or the message was refused
-- inbox.state: received | processing | done | cancelled | failed | interrupted | refused

CREATE TABLE dead_letters (
    id          INTEGER PRIMARY KEY,
    platform    TEXT NOT NULL,
    ref         TEXT NOT NULL,   -- the platform's id for it (an update id), '' when it had none
    payload     TEXT NOT NULL,   -- the raw input, cut to 64 KiB
    reason      TEXT NOT NULL,
    created_at  REAL NOT NULL
);
CREATE INDEX dead_letters_by_time ON dead_letters(created_at);
