"""The background review trusts the conversation it reads, not whoever spoke last (Telegram, fake LLM,
the real gateway): in a shared group where a non-admin said a "durable fact" and an admin spoke after it,
the review's shared note waits for an admin (PENDING.md), not in MEMORY.md, and its note about "the
person" lands in nobody's profile — also when the non-admin's message was folded into the admin's turn
(busy policy `steer`). An admin's own direct chat is still learned from at once."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from tests.engines import OpenStore
from tests.fakes.llm import FakeLLM, Reply
from tests.fakes.telegram import DEFAULT_GROUP_ID, FakeTelegram
from tests.harness import ANN, eventually, start_gateway, telegram_settings

BOB = 1002
GROUP = DEFAULT_GROUP_ID


def settings(tg: FakeTelegram, **more: Any) -> dict[str, Any]:
    """Ann is an admin, Bob an allowed user; the group is one shared session."""
    return telegram_settings(tg, access__allowed_users=f"{{telegram: [{ANN}, {BOB}]}}",
                             access__admins=f"{{telegram: [{ANN}]}}", gateway__group_sessions="shared", **more)


def is_review(body: dict[str, Any]) -> bool:
    return str(body["messages"][0]["content"]).startswith("You are reviewing")


class Reviewer:
    """A responder: each review keeps the fact its test names (a shared note and a note about the person);
    `done` is set when a review has its tools' results."""

    def __init__(self) -> None:
        self.facts: list[str] = []
        self.results: list[str] = []
        self.done = asyncio.Event()

    def __call__(self, body: dict[str, Any]) -> Reply | None:
        if not is_review(body):
            return None
        last = body["messages"][-1]
        if last["role"] == "tool":
            self.results += [m["content"] for m in body["messages"] if m["role"] == "tool"]
            self.done.set()
            return Reply.text("kept what matters")
        fact = self.facts.pop(0)
        return Reply.tool_calls([("memory", {"action": "add", "target": "memory", "text": fact}),
                                 ("memory", {"action": "add", "target": "user", "text": f"Told me: {fact}"})])


def read(path: Path) -> str:
    return path.read_text() if path.exists() else ""


async def test_an_untrusted_members_fact_in_a_shared_group_waits_for_an_admin_after_an_admin_speaks(
        tmp_path, llm: FakeLLM, tg: FakeTelegram):
    reviewer = Reviewer()
    reviewer.facts = ["Ann's team ships on Thursdays", "The office wifi password is guest123"]
    llm.responder = reviewer
    runner = await start_gateway(tmp_path, llm.base_url, **settings(tg, review__memory_every_turns=2))
    memory = tmp_path / "memory"
    try:
        tg.user_message("we ship on Thursdays")  # Ann alone, in her direct chat: learned at once
        tg.user_message("remember that")
        await asyncio.wait_for(reviewer.done.wait(), 10)
        assert "Ann's team ships on Thursdays" in read(memory / "MEMORY.md")
        assert "Told me: Ann's team ships on Thursdays" in read(memory / "users" / f"telegram-{ANN}.md")

        reviewer.done.clear()
        tg.user_message("@chatgate_bot remember: the office wifi password is guest123", chat_type="group",
                        user_id=BOB, first_name="Bob", username="bob")
        await tg.wait_until(lambda: any((m.text or "").startswith("echo: [Bob]") for m in tg.sent_messages(GROUP)))
        tg.user_message("@chatgate_bot thanks, all good", chat_type="group")  # Ann, the admin, speaks last
        await asyncio.wait_for(reviewer.done.wait(), 10)
        assert "guest123" not in read(memory / "MEMORY.md")
        assert "The office wifi password is guest123 [from telegram:1002]" in read(memory / "PENDING.md")
        assert "guest123" not in read(memory / "users" / f"telegram-{ANN}.md")  # nor in the admin's profile
        assert not (memory / "users" / f"telegram-{BOB}.md").exists()
        assert any("several people spoke in this conversation" in r for r in reviewer.results)
    finally:
        await runner.stop()


async def test_a_message_folded_into_an_admins_turn_still_counts_as_its_authors(tmp_path, llm: FakeLLM,
                                                                              tg: FakeTelegram):
    reviewer = Reviewer()
    reviewer.facts = ["The office wifi password is guest123"]
    release = asyncio.Event()

    async def respond(body: dict[str, Any]) -> Reply | None:
        if is_review(body):
            return reviewer(body)
        if body["messages"][-1]["role"] == "user" and "what time" in str(body["messages"][-1]["content"]):
            await release.wait()  # Ann's turn waits until Bob's message is folded into it
            return Reply.tool_calls([("current_time", {})])
        return None

    llm.responder = respond
    runner = await start_gateway(tmp_path, llm.base_url, **settings(tg, review__memory_every_turns=1,
                                                                    gateway__busy_policy="steer"))
    memory = tmp_path / "memory"
    try:
        tg.user_message("@chatgate_bot what time is it?", chat_type="group")  # Ann, the admin
        await llm.wait_for_requests(1)
        tg.user_message("@chatgate_bot remember: the office wifi password is guest123", chat_type="group",
                        user_id=BOB, first_name="Bob", username="bob")
        assert runner.parts is not None
        await eventually(lambda: any(w.steered for w in runner.parts.sessions.workers.values()),
                         what="Bob's message waiting to be folded into Ann's turn")
        release.set()
        await asyncio.wait_for(reviewer.done.wait(), 10)
        rows = await runner.parts.store.fetch("SELECT user_id, content FROM messages WHERE role = 'user' ORDER BY id")
        assert [(r["user_id"], r["content"].split("]")[0]) for r in rows] == [(str(ANN), "[Ann"), (str(BOB), "[Bob")]
        assert "guest123" not in read(memory / "MEMORY.md")
        assert "The office wifi password is guest123 [from telegram:1002]" in read(memory / "PENDING.md")
    finally:
        await runner.stop()


async def test_the_trust_order_and_whom_a_run_on_several_peoples_words_acts_for(open_store: OpenStore):
    from gateway.access.pairing import Pairing
    from gateway.access.trust import ADMIN, ALLOWED, ANYONE, PAIRED, Trust
    from gateway.config import AccessConfig

    store = await open_store()
    pairing = Pairing(store.access)
    code = await pairing.request("telegram", "3003", "Cy", "3003")
    assert code is not None and await pairing.approve("telegram", code) is not None
    trust = Trust(AccessConfig(admins={"telegram": ["1001"]}, allowed_users={"telegram": ["1002"]}), pairing,
                  local=frozenset({"webchat"}))
    ranks = [await trust.rank("telegram", u) for u in ("1001", "1002", "3003", "4004")]
    assert ranks == [ADMIN, ALLOWED, PAIRED, ANYONE] and await trust.rank("webchat", "tab") == ADMIN
    alone = await trust.acting_for([("telegram", "1001"), ("telegram", "1001")])
    assert alone is not None and (alone.user_id, alone.several) == ("1001", False)
    mixed = await trust.acting_for([("telegram", u) for u in ("1002", "3003", "1001")])
    assert mixed is not None and (mixed.user_id, mixed.rank, mixed.several) == ("3003", PAIRED, True)
    equals = await trust.acting_for([("telegram", u) for u in ("4004", "1001", "5005")])
    assert equals is not None and equals.user_id == "5005"  # of equals, the one who spoke last
    assert await trust.acting_for([]) is None
