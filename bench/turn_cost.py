#!/usr/bin/env python3
"""What one turn runs in the database: statements and transactions per turn, and which statements.

A gateway in this process (the web chat; the tests' fake LLM answering at once), on SQLite in a temporary home or,
with `--postgres SERVER`, on a new database on that server (made, then dropped). After `--warm` turns, `--turns`
turns of one chat one after another are counted (tests/statements.py: the connection's calls and the group
commits), and printed per turn with the statements grouped by their text. The CPU a turn costs the gateway alone
is scenario A of bench/paired_ab.sh (a `chatgate run` of its own). tests/test_turn_statements.py pins the count.

    .venv/bin/python bench/turn_cost.py [--turns 20] [--postgres postgresql://postgres@127.0.0.1:5432]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import secrets
import sys
import tempfile
from pathlib import Path
from typing import Awaitable, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests import harness  # noqa: E402
from tests.fakes.llm import FakeLLM  # noqa: E402
from tests.harness import Tab, start_gateway  # noqa: E402
from tests.statements import census  # noqa: E402


async def count(turns: int, warm: int) -> None:
    async with FakeLLM() as llm:
        runner = await start_gateway(Path(tempfile.mkdtemp(prefix="chatgate-turn-cost-")), llm.base_url)
        try:
            async with Tab(runner) as tab:
                for i in range(warm):
                    await tab.say(f"warm {i}")
                    await tab.reply(i + 1)
                with census(runner.parts.store) as counted:
                    for i in range(turns):
                        await tab.say(f"message {i}")
                        await tab.reply(warm + i + 1)
        finally:
            await runner.stop()
    engine = "PostgreSQL" if harness.STORAGE_URL else "SQLite"
    print(f"{engine}: {counted.statements / turns:.1f} statements and {counted.transactions / turns:.1f} "
          f"transactions per turn ({turns} turns)")
    for sql, n in collections.Counter(counted.sql).most_common():
        print(f"  {n / turns:4.1f}  {sql}")


async def on_new_database(server: str, work: Callable[[], Awaitable[None]]) -> None:
    """`work()` with the tests' gateways on a new database on the PostgreSQL `server` (made, then dropped)."""
    import asyncpg

    name = f"bench_{secrets.token_hex(4)}"
    admin = await asyncpg.connect(f"{server.rstrip('/')}/postgres")
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
        harness.STORAGE_URL = f"{server.rstrip('/')}/{name}"
        await work()
    finally:
        harness.STORAGE_URL = None
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


def run(server: str | None, work: Callable[[], Awaitable[None]]) -> None:
    """`work()` on SQLite in a temporary home, or with `server` on a new PostgreSQL database there."""
    asyncio.run(on_new_database(server, work) if server else work())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--warm", type=int, default=3)
    parser.add_argument("--postgres", metavar="SERVER", help="postgresql://user@host:port (a new database there)")
    options = parser.parse_args()
    run(options.postgres, lambda: count(options.turns, options.warm))


if __name__ == "__main__":
    main()
