"""The per-turn path's statements and transactions, pinned so they cannot creep back up (issue 37): a web chat turn
on SQLite, after warm-up, as `bench/turn_cost.py` prints it. Lower the pins when a change lowers the count."""

from __future__ import annotations

from pathlib import Path

from tests.fakes.llm import FakeLLM
from tests.harness import Tab, start_gateway
from tests.statements import census

TURNS = 10
STATEMENTS_PER_TURN = 12  # measured 11.6 (2026-11-29): the message stored; the session, its history and speakers
# read; the usage row; the turn's commit (messages, session, inbox, review counters, outbox); the reply's record
TRANSACTIONS_PER_TURN = 3  # the message stored; the turn's commit; the reply's record (the usage row joins one)
BACKGROUND = 2  # statements and group commits not of the turns that may fall in the window (a `later` write's own
# commit when no other came within a second; the cron watcher's look at the database's version)


async def test_a_turn_runs_no_more_statements_and_transactions_than_pinned(tmp_path: Path, llm: FakeLLM):
    runner = await start_gateway(tmp_path, llm.base_url)
    try:
        async with Tab(runner) as tab:
            for i in range(3):  # warm-up: the session opened, its prompt built, the review counters made
                await tab.say(f"warm {i}")
                await tab.reply(i + 1)
            with census(runner.parts.store) as counted:
                for i in range(TURNS):
                    await tab.say(f"message {i}")
                    await tab.reply(4 + i)
        assert counted.statements <= STATEMENTS_PER_TURN * TURNS + BACKGROUND, counted.sql
        assert counted.transactions <= TRANSACTIONS_PER_TURN * TURNS + BACKGROUND
        assert counted.statements >= 5 * TURNS  # (counting works: a turn stores, reads and commits)
    finally:
        await runner.stop()
