"""One daemon per CHATGATE_HOME: a second `chatgate run` on it is refused with one line naming the
running one, before it touches anything (its turns, approvals and updates stay the first's);
`chatgate status` and the other commands keep working beside the daemon."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gateway.ops.process import EXIT_HOME_IN_USE
from gateway.ops.unit import render_unit
from tests.fakes.llm import FakeLLM
from tests.fakes.telegram import FakeTelegram
from tests.harness import (ANN, Daemon, free_port, gateway_env, run_until_it_exits, sent_texts, telegram_settings,
                           wait_for_text)


async def second_run(daemon: Daemon) -> tuple[int, list[str]]:
    """`chatgate run` again on the same home and settings: its exit status and every line it printed."""
    return await run_until_it_exits(daemon.env)


@pytest.mark.parametrize("pid_file", ["kept", "deleted"])
async def test_a_second_daemon_on_the_same_home_is_refused_and_the_first_goes_on(tmp_path, tg: FakeTelegram,
                                                                                  pid_file: str):
    """Also with the pid file deleted while the first runs (it looks like something to tidy away): the lock
    that keeps the second off is on the home folder itself, which cannot be deleted while it holds the
    database."""
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
            if pid_file == "deleted":
                (tmp_path / "chatgate.pid").unlink()
            status, lines = await second_run(daemon)
            assert status == EXIT_HOME_IN_USE != 0
            assert len(lines) == 1, lines
            who = f"pid {daemon.process.pid}" if pid_file == "kept" else "its pid unknown"
            assert lines[0].startswith(f"chatgate cannot start: another chatgate is running on {tmp_path} ({who})")
            assert (tmp_path / "chatgate.pid").exists() == (pid_file == "kept")  # the second touched nothing
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
            assert (tmp_path / "chatgate.pid").read_text() == f"{daemon.process.pid}\n"
        finally:
            gate.set()
            daemon.close()


def test_the_service_is_not_restarted_in_a_loop_when_another_daemon_holds_the_home(tmp_path):
    unit = render_unit(home=tmp_path, writable=[], user=True, drain_seconds=30)
    assert "Restart=on-failure" in unit
    assert f"RestartPreventExitStatus={EXIT_HOME_IN_USE}" in unit.splitlines()
    shipped = (Path(__file__).resolve().parents[1] / "deploy" / "chatgate.service").read_text()
    assert f"RestartPreventExitStatus={EXIT_HOME_IN_USE}" in shipped.splitlines()


HOLD = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECTORY if sys.argv[2] == "folder" else os.O_RDWR | os.O_CREAT, 0o600)
fcntl.flock(fd, fcntl.LOCK_EX)
if sys.argv[2] == "pid file":
    os.write(fd, b"%d\\n" % os.getpid())
print("held", flush=True)
sys.stdin.readline()
"""


async def held_by(home: Path, held: str) -> None:
    """A process that holds `held` of `home` locked, as a daemon would: `status` says a daemon runs, `run` is
    refused before it touches anything; once it has gone, nobody runs."""
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(home if held == "folder" else home / "chatgate.pid"),
                               held], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    env = {**os.environ, **gateway_env(home, None)}
    status_argv = [sys.executable, "-m", "gateway", "status", "--json"]
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        done = await asyncio.to_thread(subprocess.run, status_argv, env=env, capture_output=True, text=True, timeout=60)
        report = json.loads(done.stdout)
        assert report["running"] and report["pid"] == (0 if held == "folder" else holder.pid), report
        status, lines = await run_until_it_exits(env)
        who = "its pid unknown" if held == "folder" else f"pid {holder.pid}"
        assert status == EXIT_HOME_IN_USE and len(lines) == 1, lines
        assert lines[0].startswith(f"chatgate cannot start: another chatgate is running on {home} ({who})")
        assert not (home / "state.db").exists()
    finally:
        holder.kill()
        holder.wait()
    done = await asyncio.to_thread(subprocess.run, status_argv, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 3 and json.loads(done.stdout)["pid"] is None


async def test_a_daemon_holding_either_lock_keeps_a_second_one_off(tmp_path):
    """The home folder locked (by a daemon whose pid file was deleted), or only the pid file (by a chatgate
    from before the folder was locked, still running through an upgrade): both keep a second daemon off."""
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    await held_by(home, "folder")
    await held_by(home, "pid file")


async def test_no_command_upgrades_the_database_under_a_running_daemon(tmp_path):
    """A newer chatgate installed beside a running daemon (an upgrade before its restart): its commands
    read the database but never migrate it, whichever lock shows the daemon."""
    from tests.test_migrations import LATEST, made_by_release, version

    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    made_by_release(home / "state.db", LATEST - 1)
    env = {**os.environ, **gateway_env(home, None)}
    for held in ("folder", "pid file"):
        holder = subprocess.Popen([sys.executable, "-c", HOLD, str(home if held == "folder" else home / "chatgate.pid"),
                                   held], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        try:
            assert holder.stdout is not None and holder.stdout.readline() == "held\n"
            for command in (["doctor"], ["sessions", "list"]):
                done = await asyncio.to_thread(subprocess.run, [sys.executable, "-m", "gateway", *command], env=env,
                                               capture_output=True, text=True, timeout=60)
                assert done.returncode == 1 and "the chatgate running on it is older" in done.stdout + done.stderr, \
                    (held, command, done.stdout + done.stderr)
                assert version(home / "state.db") == LATEST - 1, (held, command)
        finally:
            holder.kill()
            holder.wait()
