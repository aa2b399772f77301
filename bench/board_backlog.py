#!/usr/bin/env python3
"""A 20-task backlog with dependencies, end to end: `chatgate board` adds it to a real `chatgate run`, a scripted
model works it, and what happened is printed task by task.

The backlog: five services to migrate in order (each after the one before), each then verified and announced
(after its migration); "choose the database" asks a question (blocked), which this script answers with
`chatgate board answer` once it sees it; "flaky export" fails its first run (the model errs) and succeeds on the
second; "split the report" makes two subtasks with the agent's board tool. The model is the tests' fake LLM
scripted by title (tests/board_model.py): each turn answers at once and the judge says done.

    .venv/bin/python bench/board_backlog.py [--max-running 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.board_model import BoardModel, board_call, verdict  # noqa: E402
from tests.fakes.llm import FakeLLM, Reply  # noqa: E402
from tests.harness import gateway_env  # noqa: E402

SERVICES = ("auth", "billing", "search", "mail", "reports")


def backlog_model() -> BoardModel:
    model = BoardModel()
    flaky: list[int] = []

    def database(turn: int, text: str, body: dict[str, Any]) -> Reply:
        if "postgres" in text.lower():
            return Reply.text("chose PostgreSQL 15, as answered")
        return board_call(action="block", question="PostgreSQL or MySQL for the new cluster?")

    def export(turn: int, text: str, body: dict[str, Any]) -> Reply:
        flaky.append(turn)
        return Reply.error(500, message="overloaded") if len(flaky) == 1 else Reply.text("exported")

    def report(turn: int, text: str, body: dict[str, Any]) -> Reply:
        return board_call(action="create", title="report part one") if turn == 1 else \
            board_call(action="create", title="report part two")
    model.plans["choose the database"] = database
    model.plans["flaky export"] = export
    model.plans["split the report"] = report
    model.judged["split the report"] = [verdict(False, "one part is on the board, the other is not")]
    return model


def cli(env: dict[str, str], *args: str) -> Any:
    done = subprocess.run([sys.executable, "-m", "gateway", "board", *args, "--json"], env=env, capture_output=True,
                          text=True, check=True)
    return json.loads(done.stdout)


def add_backlog(env: dict[str, str]) -> list[int]:
    ids = [cli(env, "add", "choose the database", "--priority", "5")["id"]]
    before = ids[0]
    for name in SERVICES:
        migrated = cli(env, "add", f"migrate {name}", "--after", str(before))["id"]
        ids += [migrated, cli(env, "add", f"verify {name}", "--after", str(migrated))["id"],
                cli(env, "add", f"announce {name}", "--after", str(migrated))["id"]]
        before = migrated
    ids += [cli(env, "add", name)["id"] for name in ("flaky export", "split the report", "tidy the wiki",
                                                      "rotate the keys")]
    return ids


async def run(max_running: int) -> None:
    home = Path(tempfile.mkdtemp(prefix="chatgate-backlog-"))
    async with FakeLLM() as llm:
        llm.responder = backlog_model()
        env = {**os.environ, **gateway_env(home, llm.base_url, review__enabled="false", llm__max_retries=0,
                                           board__max_running=max_running, board__retry_seconds=1)}
        daemon = subprocess.Popen([sys.executable, "-m", "gateway", "run"], env=env, stdout=subprocess.DEVNULL,
                                  stderr=open(home / "gateway.log", "wb"))  # noqa: SIM115
        try:
            await asyncio.sleep(1.5)  # (it starts; the tasks wait on the board meanwhile anyway)
            started = time.monotonic()
            ids = await asyncio.to_thread(add_backlog, env)
            print(f"added {len(ids)} tasks with `chatgate board add` in {time.monotonic() - started:.1f} s")
            answered = False
            while True:
                board = await asyncio.to_thread(cli, env, "list")
                blocked = [t for t in board if t["status"] == "blocked"]
                if blocked and not answered:
                    print(f"t+{time.monotonic() - started:5.1f}s task {blocked[0]['id']} asks: {blocked[0]['question']}"
                          " -> chatgate board answer ... 'PostgreSQL, please'")
                    await asyncio.to_thread(cli, env, "answer", str(blocked[0]["id"]), "PostgreSQL, please")
                    answered = True
                if board and all(t["status"] == "done" for t in board):
                    break
                await asyncio.sleep(0.3)
            wall = time.monotonic() - started
            events = {t["id"]: (await asyncio.to_thread(cli, env, "show", str(t["id"])))["events"] for t in board}
        finally:
            daemon.terminate()
            daemon.wait(30)
    report(board, events, wall, max_running)


def report(board: list[dict[str, Any]], events: dict[int, list[dict[str, Any]]], wall: float, max_running: int) -> None:
    timeline = sorted((e["id"], task_id, e["kind"]) for task_id, found in events.items() for e in found)
    running: set[int] = set()
    most, done_order = 0, []
    for _, task_id, kind in timeline:
        if kind == "started":
            running.add(task_id)
            most = max(most, len(running))
        elif kind in ("done", "blocked", "failed", "reclaimed", "interrupted"):
            running.discard(task_id)
            if kind == "done":
                done_order.append(task_id)
    print(f"all {len(board)} tasks done in {wall:.1f} s; at most {most} running at once (board.max_running "
          f"{max_running})")
    for task in sorted(board, key=lambda t: t["id"]):
        kinds = [e["kind"] for e in events[task["id"]] if e["kind"] != "turn"]
        turns = sum(e["kind"] == "turn" for e in events[task["id"]])
        after = f" after {task['parents']}" if task["parents"] else ""
        made = f" made by task {task['created_by']}" if task["created_by"] else ""
        print(f"  {task['id']:>2} {task['title']:<22}{after}{made}: runs {task['attempts']}, turns {turns}, done "
              f"#{done_order.index(task['id']) + 1}; {' > '.join(kinds)}")
    order_kept = all(done_order.index(p) < done_order.index(t["id"]) for t in board for p in t["parents"])
    print(f"every task done after its parents: {order_kept}; done twice: "
          f"{any(sum(e['kind'] == 'done' for e in found) > 1 for found in events.values())}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--max-running", type=int, default=3)
    asyncio.run(run(parser.parse_args().max_running))


if __name__ == "__main__":
    main()
