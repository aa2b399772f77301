-- Every turn now asks whose words its session holds (`SessionStore.speakers`: whom it acts for). This index
-- holds each person's messages of a session in order, so the question is answered by a few lookups per
-- person, not by reading the whole session (a shared group's session can run to many thousand messages).

CREATE INDEX messages_speakers ON messages (session_id, platform, user_id, id)
    WHERE role = 'user' AND status = 'ok' AND user_id IS NOT NULL;
