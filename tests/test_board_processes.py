"""The task board across processes: real `chatgate run` daemons and `chatgate board` beside them.

A task the CLI adds is run by the daemon that is up (it looks at the board's version every second); a daemon
killed with SIGKILL in the middle of a task's run leaves the task `running`, and the next start reclaims it at
once and runs it again: the task is done once, and its chat is told once. On PostgreSQL, two instances share
the board: together they run no more than `board.max_running`, and one takes over a killed one's run."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from tests.board_model import hangs_first, scripted
from tests.fakes.llm import FakeLLM, Reply
from tests.fakes.telegram import FakeTelegram
from tests.harness import ANN, Daemon, eventually, telegram_settings, wait_for_text
from tests.instances import Instance, poller_and_standby, shared_database  # noqa: F401  (a fixture)
from tests.pg import pg_url  # noqa: F401  (a fixture)

QUIET = {"review__enabled": "false"}


def show(daemon: Daemon, task_id: int) -> dict[str, Any]:
    done = daemon.cli("board", "show", str(task_id), "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


async def test_a_task_the_cli_adds_is_run_by_the_daemon_and_its_result_read_back(tmp_path, tg: FakeTelegram):
    async with FakeLLM() as llm:
        model = scripted(llm)
        model.plans["count the files"] = lambda turn, text, body: Reply.text("there are 42 files")
        daemon = Daemon(tmp_path, llm, telegram_settings(tg, **QUIET))
        try:
            daemon.start()
            await tg.wait_for("getUpdates", timeout=20)
            added = daemon.cli("board", "add", "count the files", "--body", "in the workspace",
                               "--to", f"telegram:{ANN}", "--json")
            assert added.returncode == 0, added.stderr
            task = json.loads(added.stdout)
            assert (task["status"], task["owner"], task["origin"]) == ("ready", "operator", f"telegram:{ANN}")
            await wait_for_text(tg, f"✅ Task {task['id']} done: count the files\n\nthere are 42 files", timeout=20)
            shown = show(daemon, task["id"])
            assert (shown["status"], shown["result"], shown["attempts"]) == ("done", "there are 42 files", 1)
            assert [e["kind"] for e in shown["events"]] == ["added", "started", "turn", "done"]
            assert "in the workspace" in model.turns[0][2]
        finally:
            daemon.close()


async def test_kill_9_in_the_middle_of_a_run_and_the_task_is_done_once(tmp_path, tg: FakeTelegram):
    async with FakeLLM() as llm:
        model = scripted(llm)
        runs: list[int] = []

        model.plans["migrate the database"] = hangs_first(runs, "migrated")  # (killed during the first)
        daemon = Daemon(tmp_path, llm, telegram_settings(tg, **QUIET))
        try:
            daemon.start()
            await tg.wait_for("getUpdates", timeout=20)
            added = daemon.cli("board", "add", "migrate the database", "--to", f"telegram:{ANN}", "--json")
            task_id = json.loads(added.stdout)["id"]
            await eventually(lambda: runs == [1], timeout=20, what="the first run's turn under way")
            assert show(daemon, task_id)["status"] == "running"
            daemon.kill()
            assert show(daemon, task_id)["status"] == "running"  # (nobody to say otherwise yet)
            daemon.start()
            await wait_for_text(tg, f"✅ Task {task_id} done: migrate the database\n\nmigrated", timeout=20)
            shown = show(daemon, task_id)
            assert (shown["status"], shown["attempts"]) == ("done", 2)
            kinds = [e["kind"] for e in shown["events"]]
            assert kinds.count("done") == 1 and kinds.count("reclaimed") == 1 and kinds.count("started") == 2
            assert await daemon.terminate() == 0
            told = [m.text for m in tg.sent_messages(ANN) if (m.text or "").startswith(f"✅ Task {task_id}")]
            started = [m.text for m in tg.sent_messages(ANN) if (m.text or "").startswith(f"▶ Task {task_id}")]
            assert len(told) == 1 and len(started) == 1
        finally:
            daemon.close()


async def test_two_instances_on_postgresql_share_the_board_and_one_takes_over_a_killed_ones_run(
        tmp_path, tg: FakeTelegram, shared_database: str):
    """`board.max_running` holds for both instances together; the run of an instance killed with SIGKILL is
    reclaimed by the other once its heartbeat is older than `board.stale_seconds`, and every task is done once."""
    async with FakeLLM() as llm:
        model = scripted(llm)
        release = asyncio.Event()
        for title in ("one", "two", "three"):  # (each turn's answer waits until the test lets it go)
            model.plans[title] = lambda turn, text, body, title=title: Reply.text(f"did {title}", hold=release)
        async with poller_and_standby(tmp_path, llm, tg, shared_database, board__max_running=2,
                                      board__stale_seconds=2, **QUIET) as (first, second):
            for title in ("one", "two", "three"):
                assert first.cli("board", "add", title, "--to", f"telegram:{ANN}").returncode == 0
            await eventually(lambda: len(model.turns) == 2, timeout=20, what="two tasks' turns under way")
            board = json.loads(first.cli("board", "list", "--json").stdout)
            running = [t for t in board if t["status"] == "running"]
            assert len(running) == 2 and [t["status"] for t in board].count("ready") == 1
            victim = next(i for i in (first, second) if f":{i.process.pid}:" in running[0]["runner"])
            victim.kill()
            survivor = second if victim is first else first
            release.set()
            for task in board:
                await wait_for_text(tg, f"✅ Task {task['id']} done: {task['title']}\n\ndid {task['title']}",
                                    timeout=30)
            final = json.loads(survivor.cli("board", "list", "--json").stdout)
            assert [t["status"] for t in final] == ["done"] * 3
            lost = show(survivor, running[0]["id"])
            assert [e["kind"] for e in lost["events"]].count("reclaimed") == 1 and lost["attempts"] == 2
            told = [m.text for m in tg.sent_messages(ANN) if (m.text or "").startswith("✅ Task")]
            assert sorted(told) == sorted(set(told)) and len(told) == 3


async def test_on_postgresql_a_restarted_instance_takes_its_killed_lifes_run_back_at_once(
        tmp_path, tg: FakeTelegram, shared_database: str):
    """The killed process's life lease still runs, and its heartbeat is fresh (board.stale_seconds is long): the
    next start on the same machine sees that process gone (gateway.cron.ledger.instance_gone) and reclaims."""
    async with FakeLLM() as llm:
        model = scripted(llm)
        runs: list[int] = []

        model.plans["rebuild the index"] = hangs_first(runs, "rebuilt")  # (killed during the first)
        instance = Instance(tmp_path / "a", llm, tg, shared_database, board__stale_seconds=3600, **QUIET)
        try:
            instance.start()
            await instance.until("ready")
            task_id = json.loads(instance.cli("board", "add", "rebuild the index", "--json").stdout)["id"]
            await eventually(lambda: runs == [1], timeout=20, what="the first run's turn under way")
            instance.kill()
            instance.start()
            await eventually(lambda: show(instance, task_id)["status"] == "done", timeout=30, what="done")
            [reclaimed] = [e["text"] for e in show(instance, task_id)["events"] if e["kind"] == "reclaimed"]
            assert reclaimed.endswith("was lost: its process exited")  # (not its lease's end, 20 s on)
        finally:
            instance.close()
