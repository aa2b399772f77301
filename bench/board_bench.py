#!/usr/bin/env python3
"""The task board at size: what a tick costs with a big board, how fast a backlog is dispatched, what listing costs.

A gateway in this process (the web chat; the tests' fake LLM as a scripted model that answers at once and judges
every turn done), on SQLite in a temporary home or, with `--postgres SERVER`, on a new database there:

- tick: the median time of one tick's hooks (`Tick.run_hooks` until they are idle), the board empty, then with
  `--tasks` tasks waiting on a parent that is not done (the dispatcher reads them and starts none);
- list: the median time of `BoardStore.list()` and of `chatgate board list --json` (a process of its own) then;
- dispatch: `--tasks` ready tasks run to the end, `board.max_running` at a time: wall time and tasks per second.

    .venv/bin/python bench/board_bench.py [--tasks 200] [--max-running 4] [--postgres postgresql://postgres@127.0.0.1:5432]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.turn_cost import run  # noqa: E402
from tests import harness  # noqa: E402
from tests.board_model import BoardModel  # noqa: E402
from tests.fakes.llm import FakeLLM  # noqa: E402
from tests.harness import gateway_env, start_gateway  # noqa: E402


async def tick_ms(runner, rounds: int = 15) -> float:
    tick = runner.parts.tick
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        await tick.run_hooks()
        await tick.wait_idle()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


async def measure(tasks: int, max_running: int) -> None:
    home = Path(tempfile.mkdtemp(prefix="chatgate-board-bench-"))
    async with FakeLLM() as llm:
        llm.responder = BoardModel()
        settings = {"review__enabled": "false", "board__max_running": str(max_running)}
        runner = await start_gateway(home, llm.base_url, **settings)
        try:
            board = runner.parts.store.board
            empty = await tick_ms(runner)
            parent = await board.add("a parent that waits")
            await board.block(parent.id, None, "wait", None, None)  # (blocked before it runs: its children wait)
            for n in range(tasks):
                await board.add(f"task {n}", parents=[parent.id])
            waiting = await tick_ms(runner)
            listed = []
            for _ in range(15):
                started = time.perf_counter()
                await board.list()
                listed.append((time.perf_counter() - started) * 1000)
            cli = []
            env = {**os.environ, **gateway_env(home, llm.base_url, **settings)}
            for _ in range(5):
                started = time.perf_counter()
                subprocess.run([sys.executable, "-m", "gateway", "board", "list", "--json"], env=env, check=True,
                               capture_output=True)
                cli.append(time.perf_counter() - started)
            started = time.perf_counter()
            await board.answer(parent.id, "operator", "go")  # the parent runs, then every child is ready
            while (await board.counts())["done"] < tasks + 1:
                await asyncio.sleep(0.05)
            wall = time.perf_counter() - started
        finally:
            await runner.stop()
    engine = "PostgreSQL" if harness.STORAGE_URL else "SQLite"
    print(f"{engine}, {tasks} tasks, board.max_running {max_running}:")
    print(f"  tick (all hooks): {empty:.1f} ms with an empty board, {waiting:.1f} ms with {tasks} tasks waiting")
    print(f"  BoardStore.list(): {statistics.median(listed):.1f} ms; `chatgate board list --json`: "
          f"{statistics.median(cli) * 1000:.0f} ms (a process of its own)")
    print(f"  dispatch: {tasks + 1} tasks done in {wall:.2f} s ({(tasks + 1) / wall:.1f} tasks/s; each: a turn and "
          "its judgement)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=200)
    parser.add_argument("--max-running", type=int, default=4)
    parser.add_argument("--postgres", metavar="SERVER", help="postgresql://user@host:port (a new database there)")
    options = parser.parse_args()
    run(options.postgres, lambda: measure(options.tasks, options.max_running))


if __name__ == "__main__":
    main()
