"""Two `chatgate run` processes on one PostgreSQL database: webhook updates spread over both are answered once
each, in order per chat; and killed (kill -9) in turn at the worst moments while twenty chats wait for their
answers, every chat gets its answer exactly once (one bot message, never a second one sent and deleted),
whichever instance ends up running it."""

from __future__ import annotations

import json
from pathlib import Path

from tests.fakes.llm import FakeLLM
from tests.fakes.telegram import FakeTelegram
from tests.harness import each_answered_once, eventually, sent_texts, wait_for_text
from tests.instances import Instance, poller_and_standby, shared_database  # noqa: F401  (a fixture)
from tests.pg import pg_url  # noqa: F401  (a fixture)
from tests.test_crash_e2e import storm_model

USERS = list(range(6001, 6021))
WEBHOOK = {"platforms__telegram__mode": "webhook", "access__dm_policy": "open",
           "platforms__telegram__webhook_url": "http://placeholder/telegram/webhook"}


async def test_webhook_updates_spread_over_two_instances_are_each_answered_once_and_in_order(
        tmp_path: Path, shared_database: str, tg: FakeTelegram):  # noqa: F811
    """A load balancer sends each update to either instance: five chats, four messages each, alternating; a turn
    takes a moment, so a chat's next message often reaches the other instance while its turn runs."""
    chats = list(range(7001, 7006))
    async with FakeLLM(latency=0.3) as llm:
        instances = [Instance(tmp_path / name, llm, tg, shared_database, **WEBHOOK) for name in ("a", "b")]
        try:
            for instance in instances:
                instance.start()
                await instance.until("ready")
            update = 0
            for k in range(4):
                for chat in chats:
                    update += 1
                    target = instances[(k + chat) % 2]
                    tg.webhook_url = f"http://127.0.0.1:{target.port}/telegram/webhook"
                    assert await tg.push_webhook(tg.user_message(f"m{chat}-{k}", user_id=chat,
                                                                 update_id=update)) == 200
            for chat in chats:
                await wait_for_text(tg, f"echo: m{chat}-3", timeout=40)
            for chat in chats:
                assert sent_texts(tg, chat) == [f"echo: m{chat}-{k}" for k in range(4)], chat
            assert len(llm.requests) == 20

            def conversations() -> dict[int, int]:
                status = json.loads(instances[0].cli("status", "--json").stdout)
                return {i["pid"]: i["conversations"] for i in status["instances"]}
            assert set(conversations()) == {i.process.pid for i in instances}  # type: ignore[union-attr]
            await eventually(lambda: sum(conversations().values()) == 0, 20, "every conversation given up")
        finally:
            for instance in instances:
                instance.close()


async def test_instances_killed_in_turn_leave_every_answer_exactly_once(
        tmp_path: Path, shared_database: str, tg: FakeTelegram):  # noqa: F811
    phase = {"name": "hang"}
    async with FakeLLM() as llm, poller_and_standby(tmp_path, llm, tg, shared_database,
                                                    access__dm_policy="open") as (first, second):
        llm.responder = storm_model(phase)
        for user in USERS:
            tg.user_message(f"q{user}", user_id=user)
        # 1: every message stored by A, every turn waiting on the model there
        await llm.wait_for_requests(len(USERS), timeout=30)
        phase["name"] = "stream"
        first.kill()
        # 2: B takes the connection and the conversations over; every turn shows (and records) a preview
        await eventually(lambda: len(first.rows("SELECT 1 FROM inbox WHERE draft_message_id IS NOT NULL"))
                         == len(USERS), timeout=60, what="20 previews recorded, by B")
        first.start()
        await first.until("standby")
        phase["name"] = "answer"
        second.kill()
        # 3: A takes everything back, each turn run again over its preview, and answers
        await each_answered_once(tg, first, {user: f"answer to q{user}" for user in USERS})
        assert await first.telegram_state() == "ready"
