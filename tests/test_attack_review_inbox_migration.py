"""Attack review of migration 016 (the inbox's typed origin): the old goal turns it recognises by their
message id 'goal:<id>:<seq>'.

Before 016 a web chat page chose its own message ids, in the same space as a goal's turns (what 016 is
for). A row that only looks like a turn of the goal — 'goal:1:03', 'goal:1:2x' beside the real 'goal:1:3' —
was read as the same turn (1, 3), and the unique index on goal turns could not be made: the migration
failed, and a chatgate upgraded onto that database did not start. Only a row whose id is exactly the
turn's own, in the goal's own chat, is a goal turn."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from gateway.storage import Store
from tests.test_migrations import made_by_release

ORIGIN = {"platform": "webchat", "chat_id": "c1", "chat_type": "dm", "user_id": "owner", "user_name": "",
          "text": "", "message_id": "m1"}


async def test_rows_that_look_like_a_goals_turn_stay_a_persons_messages_and_the_upgrade_starts(tmp_path: Path):
    path = tmp_path / "state.db"
    made_by_release(path, 15)
    rows = [("goal:1:3", "done"), ("goal:1:03", "done"), ("goal:1:2x", "done"), ("goal:1:4", "received")]
    with sqlite3.connect(path) as db:
        db.execute("INSERT INTO goals (id, session_key, origin, objective, state, max_turns, seq, judged, created_at,"
                   " updated_at) VALUES (1, 'webchat:c1', ?, 'tidy up', 'active', 20, 4, 3, 1, 1)",
                   (json.dumps(ORIGIN),))
        for message_id, state in rows:  # the real turns 3 and 4, and two a page sent
            db.execute("INSERT INTO inbox (platform, chat_id, platform_message_id, session_key, payload, state,"
                       " received_at, updated_at) VALUES ('webchat', 'c1', ?, 'webchat:c1', ?, ?, 1, 1)",
                       (message_id, json.dumps({**ORIGIN, "message_id": message_id}), state))
    store = await Store.open(path)
    try:
        got = await store.fetch("SELECT platform_message_id, origin, goal_id, goal_seq FROM inbox ORDER BY id")
        assert [tuple(r) for r in got] == [("goal:1:3", "goal", 1, 3), ("goal:1:03", "person", None, None),
                                           ("goal:1:2x", "person", None, None), ("goal:1:4", "goal", 1, 4)]
        [waiting] = await store.inbox.unfinished()
        assert waiting.goal_turn == (1, 4)
    finally:
        await store.close()
