"""Several instances on one PostgreSQL database: an approval asked by a turn on one instance is decided on
whichever instance the press (or the command) reaches, and the waiting turn goes on at once; an instance
that starts or stops ends only the requests nobody else waits for.

Two gateways, each with its own home and port, share nothing but the database (and the fake Telegram, in
webhook mode: each update is posted to the instance a load balancer would pick).
"""

from __future__ import annotations

from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, AsyncIterator

import pytest

from gateway import approvals as approvals_module
from tests.fakes.llm import FakeLLM, Reply
from tests.fakes.telegram import FakeTelegram
from tests.harness import start_gateway
from tests.instances import instance_settings, post_update, shared_database, two_instances  # noqa: F401
from tests.pg import pg_url  # noqa: F401  (a fixture)

ANN = 1001


async def _prompt(tg: FakeTelegram) -> tuple[int, dict[str, str]]:
    [call] = await tg.wait_for("sendMessage", lambda c: bool(c.get("reply_markup")), timeout=10)
    prompt_id = int(call.result["message_id"])
    [message] = [m for m in tg.sent_messages(ANN) if m.message_id == prompt_id]
    return prompt_id, {b["text"]: b["callback_data"] for b in sum(message.reply_markup["inline_keyboard"], [])}


@asynccontextmanager
async def two_gateways(tmp_path: Path, llm: FakeLLM, tg: FakeTelegram) -> AsyncIterator[tuple[Any, Any]]:
    """Instances A and B on the test's database; a scripted turn that asks to delete `victim`, then says done."""
    llm.script(Reply.tool_calls([("terminal", {"command": "rm -rf victim"})]), Reply.text("done"))
    async with two_instances(tmp_path, llm, tg) as both:
        yield both


async def test_a_press_on_the_other_instance_wakes_the_turn_waiting_on_the_first(
        tmp_path: Path, llm: FakeLLM, tg: FakeTelegram, shared_database: str):
    async with two_gateways(tmp_path, llm, tg) as (first, second):
        await post_update(tg, first, tg.user_message("delete victim", update_id=1))
        prompt_id, buttons = await _prompt(tg)
        assert first.parts.approvals.waiting == 1 and second.parts.approvals.waiting == 0  # the turn runs on A
        await post_update(tg, second, tg.callback_query(buttons["Allow once"], message_id=prompt_id, update_id=2))
        [answer] = await tg.wait_for("answerCallbackQuery")
        assert answer.get("text") == "Allow once — done."
        await tg.wait_for("sendMessage", lambda c: c.get("text") == "done", timeout=10)
        assert not (tmp_path / "ws" / "victim").exists()  # the command ran, once, on A
        assert [m["content"] for r in llm.requests for m in r["messages"] if m["role"] == "tool"] != []


async def test_an_approve_command_on_the_other_instance_decides_it(
        tmp_path: Path, llm: FakeLLM, tg: FakeTelegram, shared_database: str):
    async with two_gateways(tmp_path, llm, tg) as (first, second):
        await post_update(tg, first, tg.user_message("delete victim", update_id=1))
        await _prompt(tg)
        await post_update(tg, second, tg.user_message("/deny not now", update_id=2))
        await tg.wait_for("sendMessage", lambda c: c.get("text") == "Denied.", timeout=10)
        await tg.wait_for("sendMessage", lambda c: c.get("text") == "done", timeout=10)
        assert (tmp_path / "ws" / "victim").exists()


async def test_an_instance_starting_or_stopping_leaves_another_ones_request_waiting(
        tmp_path: Path, llm: FakeLLM, tg: FakeTelegram, shared_database: str):
    llm.script(Reply.tool_calls([("terminal", {"command": "rm -rf victim"})]), Reply.text("done"))
    first = await start_gateway(tmp_path / "a", llm.base_url, **instance_settings(tmp_path, tg))
    try:
        await post_update(tg, first, tg.user_message("delete victim", update_id=1))
        prompt_id, buttons = await _prompt(tg)
        second = await start_gateway(tmp_path / "b", llm.base_url, **instance_settings(tmp_path, tg))  # expires its own
        await second.stop()  # and stopping, again only its own
        assert first.parts.approvals.waiting == 1
        assert [a.state for a in [await first.parts.store.approvals.get(i)
                                  for i in await first.parts.store.approvals.pending()]] == ["pending"]
        await post_update(tg, first, tg.callback_query(buttons["Allow once"], message_id=prompt_id, update_id=2))
        await tg.wait_for("sendMessage", lambda c: c.get("text") == "done", timeout=10)
        assert not (tmp_path / "ws" / "victim").exists()
    finally:
        await first.stop()


async def test_a_decision_on_the_other_instance_just_before_the_timeout_is_the_outcome(
        tmp_path: Path, llm: FakeLLM, tg: FakeTelegram, shared_database: str, monkeypatch: pytest.MonkeyPatch):
    """B decides; A's timeout ends its wait before a poll saw it: A's "expired" finds the request decided, and
    the turn goes on with B's decision (it neither fails nor runs it twice)."""
    monkeypatch.setattr(approvals_module, "POLL_SECONDS", 3600.0)  # (A learns of it only at its timeout)
    settings = {**instance_settings(tmp_path, tg), "approvals__timeout_seconds": 3}
    llm.script(Reply.tool_calls([("terminal", {"command": "rm -rf victim"})]), Reply.text("done"))
    first = await start_gateway(tmp_path / "a", llm.base_url, **settings)
    second = await start_gateway(tmp_path / "b", llm.base_url, **settings)
    try:
        await post_update(tg, first, tg.user_message("delete victim", update_id=1))
        prompt_id, buttons = await _prompt(tg)
        await post_update(tg, second, tg.callback_query(buttons["Allow once"], message_id=prompt_id, update_id=2))
        [answer] = await tg.wait_for("answerCallbackQuery")
        assert answer.get("text") == "Allow once — done."
        await tg.wait_for("sendMessage", lambda c: c.get("text") == "done", timeout=10)
        assert not (tmp_path / "ws" / "victim").exists()  # allowed once: it ran
        [result] = [m["content"] for r in llm.requests for m in r["messages"] if m["role"] == "tool"][-1:]
        assert "expired" not in result.lower()
    finally:
        await second.stop()
        await first.stop()
