-- Sends whose message id may go unrecorded (a kill -9 between the platform's answer and the write that
-- records it). Written before the send, in a commit of its own or one that happens anyway, so that after
-- a crash the message the send may have made is looked for and edited instead of a second one sent.
-- Both are JSON; `after` is the newest message id chatgate knew in that chat before the send (every
-- message made by the send comes after it), null when it knew none.

-- {"after": id}: the first send of the turn's draft (its streaming preview) was started; cleared when
-- its id is recorded in draft_message_id.
ALTER TABLE inbox ADD COLUMN draft_intent TEXT;

-- {"part": n, "after": id, "draft": bool}: part n of the reply may be on its way (set when the reply is
-- queued, and with the record of part n - 1); `draft`: it may find the turn's draft, whose first send
-- was started but never recorded. Null once the reply is sent, or while no part is on its way.
ALTER TABLE outbox ADD COLUMN intent TEXT;
