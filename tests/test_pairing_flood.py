"""Strangers cannot block pairing: however many ask for a code first, the next person still gets one
that `chatgate pair approve` accepts; the pending codes stay bounded and the owner's list readable."""

from __future__ import annotations

import asyncio
import re

from gateway import cli
from gateway.access.pairing import MAX_PENDING
from tests.fakes.llm import FakeLLM
from tests.fakes.telegram import FakeTelegram
from tests.harness import gateway_env, telegram_gateway, wait_for_text

FIRST = 3  # as many as used to block all pairing for an hour
MORE = MAX_PENDING + 5  # more than may wait at once


async def code_for(tg: FakeTelegram, user_id: int, since: int = 0) -> str:
    [offer] = await tg.wait_for("sendMessage", lambda c: c.get("chat_id") == str(user_id)
                                and "pairing code" in str(c.get("text")), timeout=10, since=since)
    return re.search(r"pairing code is ([A-Z2-9]{8})", str(offer.get("text"))).group(1)  # type: ignore[union-attr]


def strangers_write(tg: FakeTelegram, first: int, count: int) -> None:
    for n in range(first, first + count):  # each writes twice: still one code each
        tg.user_message("let me in", user_id=5000 + n, first_name=f"Stranger {n}\napproved  telegram 1 Ann")
        tg.user_message("let me in!", user_id=5000 + n, first_name=f"Stranger {n}")


async def test_strangers_first_do_not_stop_the_next_person_from_pairing(tmp_path, llm: FakeLLM, tg: FakeTelegram,
                                                                        monkeypatch, capsys):
    runner = await telegram_gateway(tmp_path, llm, tg)
    for key, value in gateway_env(tmp_path, None).items():  # (for `chatgate` beside it)
        monkeypatch.setenv(key, value)

    async def chatgate(*args: str) -> list[str]:
        capsys.readouterr()
        assert await asyncio.to_thread(cli.main, list(args)) == 0
        return capsys.readouterr().out.splitlines()

    try:
        strangers_write(tg, 0, FIRST)
        await tg.wait_for("sendMessage", lambda c: "pairing code" in str(c.get("text")), count=FIRST, timeout=10)
        tg.user_message("hello, I am Dana", user_id=4242, first_name="Dana")
        code = await code_for(tg, 4242)
        assert "approved Dana" in (await chatgate("pair", "approve", "telegram", code))[0]
        tg.user_message("now?", user_id=4242, first_name="Dana")
        await wait_for_text(tg, "echo: now?")

        strangers_write(tg, FIRST, MORE)
        await tg.wait_for("sendMessage", lambda c: "pairing code" in str(c.get("text")), count=FIRST + 1 + MORE,
                          timeout=30)
        await asyncio.sleep(0.3)  # (and no second code to anyone who wrote twice)
        assert len([c for c in tg.calls_to("sendMessage") if "pairing code" in str(c.get("text"))]) == \
            FIRST + 1 + MORE
        listing = await chatgate("pair", "list")
        pending = [line for line in listing if line.startswith("pending   telegram ")]
        assert len(pending) == MAX_PENDING  # bounded: the oldest made room for the newest
        assert listing == [*pending, listing[-1]]  # one line each: a name with a line break cannot add one
        assert listing[-1].split()[:4] == ["approved", "telegram", "4242", "Dana"]
        assert "Stranger 0 " not in "\n".join(pending)  # the oldest code went first

        since = len(tg.calls)
        tg.user_message("me again", user_id=5000, first_name="Stranger 0")  # its code was dropped: a new one
        again = await code_for(tg, 5000, since)
        assert "approved Stranger 0" in (await chatgate("pair", "approve", "telegram", again))[0]
    finally:
        await runner.stop()
