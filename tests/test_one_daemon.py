"""One daemon per CHATGATE_HOME: a second `chatgate run` on it is refused with one line naming the
running one, before it touches anything (its turns, approvals and updates stay the first's);
`chatgate status` and the other commands keep working beside the daemon."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from gateway.ops.process import EXIT_HOME_IN_USE
from gateway.ops.unit import render_unit
from tests.fakes.llm import FakeLLM
from tests.fakes.telegram import FakeTelegram
from tests.harness import ANN, Daemon, free_port, run_until_it_exits, sent_texts, telegram_settings, wait_for_text


async def second_run(daemon: Daemon) -> tuple[int, list[str]]:
    """`chatgate run` again on the same home and settings: its exit status and every line it printed."""
    return await run_until_it_exits(daemon.env)


async def test_a_second_daemon_on_the_same_home_is_refused_and_the_first_goes_on(tmp_path, tg: FakeTelegram):
    gate = asyncio.Event()

    async def held(body: dict[str, Any]) -> None:  # the first question's turn stays in flight until told
        await gate.wait()

    async with FakeLLM() as llm:
        llm.responder = held
        daemon = Daemon(tmp_path, llm, telegram_settings(tg, http__port=free_port()))
        try:
            daemon.start()
            assert daemon.process is not None
            tg.user_message("first question")
            await llm.wait_for_requests(1, timeout=30)  # a turn in flight
            status, lines = await second_run(daemon)
            assert status == EXIT_HOME_IN_USE != 0
            assert len(lines) == 1, lines
            assert lines[0].startswith(f"chatgate cannot start: another chatgate is running on {tmp_path} "
                                       f"(pid {daemon.process.pid})")
            assert len(tg.calls_to("getMe")) == 1  # the second never reached Telegram (no 409 fight)
            assert len(llm.requests) == 1  # nor ran the first's turn again
            assert [r["state"] for r in daemon.rows("SELECT state FROM inbox")] in (["received"], ["processing"])
            done = await asyncio.to_thread(daemon.cli, "status", "--json")
            report = json.loads(done.stdout)
            assert done.returncode == 0 and report["running"] and report["ready"]
            assert report["pid"] == daemon.process.pid and report["queue"]["running"] + report["queue"]["waiting"] == 1
            listed = await asyncio.to_thread(daemon.cli, "sessions", "list")
            assert listed.returncode == 0 and "telegram" in listed.stdout
            added = await asyncio.to_thread(daemon.cli, "cron", "add", "beside", "every 1h", "p", "--to", "none")
            assert added.returncode == 0, added.stderr  # commands that write work beside it too
            gate.set()
            await wait_for_text(tg, "echo: first question", timeout=20)
            tg.user_message("second question")
            await wait_for_text(tg, "echo: second question", timeout=20)
            assert sent_texts(tg, ANN) == ["echo: first question", "echo: second question"]
            assert daemon.process.poll() is None and len(llm.requests) == 2
            assert await daemon.terminate() == 0
            daemon.start()  # once it has stopped, the home is free again
            tg.user_message("third question")
            await wait_for_text(tg, "echo: third question", timeout=30)
        finally:
            gate.set()
            daemon.close()


def test_the_service_is_not_restarted_in_a_loop_when_another_daemon_holds_the_home(tmp_path):
    unit = render_unit(home=tmp_path, writable=[], user=True, drain_seconds=30)
    assert "Restart=on-failure" in unit
    assert f"RestartPreventExitStatus={EXIT_HOME_IN_USE}" in unit.splitlines()
    shipped = (Path(__file__).resolve().parents[1] / "deploy" / "chatgate.service").read_text()
    assert f"RestartPreventExitStatus={EXIT_HOME_IN_USE}" in shipped.splitlines()
