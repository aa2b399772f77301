"""Attack review: the daemon's lock file (`$CHATGATE_HOME/chatgate.pid`) is truncated and written at start,
so a link planted there by whoever can write in the home (another local user where the home is shared or
made by them, a command the agent ran unconfined) had the daemon — perhaps root — overwrite the file it
points at. `chatgate run` now refuses to start with one line and leaves that file alone."""

from __future__ import annotations

import os

import pytest

from tests.fakes.llm import FakeLLM
from tests.fakes.telegram import FakeTelegram
from tests.harness import Daemon, free_port, run_until_it_exits, telegram_settings

PRECIOUS = "root:x:0:0:root:/root:/bin/bash\n"


@pytest.mark.parametrize("link", ["symbolic", "hard"])
async def test_a_link_planted_as_the_lock_file_is_not_written_through(tmp_path, tg: FakeTelegram, link: str):
    victim = tmp_path / "victim"  # (outside the home: what the link leads to)
    victim.write_text(PRECIOUS)
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    if link == "symbolic":
        (home / "chatgate.pid").symlink_to(victim)
    else:
        os.link(victim, home / "chatgate.pid")
    async with FakeLLM() as llm:
        daemon = Daemon(home, llm, telegram_settings(tg, http__port=free_port()))
        status, lines = await run_until_it_exits(daemon.env)
    assert victim.read_text() == PRECIOUS  # not truncated, no pid written into it
    assert status == 1, lines
    assert any(line.startswith("chatgate cannot start: cannot lock") for line in lines), lines
    assert not tg.calls_to("getMe")  # it stopped before reaching a platform


async def test_the_ordinary_lock_file_still_works(tmp_path):
    from gateway.ops.process import HomeLock, daemon_pid

    lock = HomeLock.take(tmp_path)  # made afresh, then taken again after a stop
    assert daemon_pid(tmp_path) == os.getpid()
    lock.release()
    HomeLock.take(tmp_path).release()
    assert (tmp_path / "chatgate.pid").stat().st_mode & 0o777 == 0o600


@pytest.mark.parametrize("daemon_running", [False, True])
async def test_a_fifo_planted_as_the_lock_file_hangs_neither_status_nor_a_refused_run(tmp_path, daemon_running: bool):
    """A FIFO named chatgate.pid in the home (made by whoever can write there) had `chatgate status`, and a
    second `chatgate run` refused beside a daemon, wait for ever on opening it to read the pid."""
    import asyncio
    import json
    import subprocess
    import sys

    from gateway.ops.process import EXIT_HOME_IN_USE
    from tests.harness import gateway_env
    from tests.test_one_daemon import HOLD

    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    os.mkfifo(home / "chatgate.pid", 0o600)
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(home), "folder"], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True) if daemon_running else None
    env = {**os.environ, **gateway_env(home, None)}
    try:
        assert holder is None or (holder.stdout is not None and holder.stdout.readline() == "held\n")
        done = await asyncio.to_thread(subprocess.run, [sys.executable, "-m", "gateway", "status", "--json"], env=env,
                                       capture_output=True, text=True, timeout=30)  # (it hung: fails here)
        assert json.loads(done.stdout)["running"] is daemon_running, done
        assert done.returncode == (1 if daemon_running else 3), done  # (running: not answering on HTTP)
        assert [line for line in done.stderr.splitlines() if "chatgate.pid" in line] == [
            f"{home / 'chatgate.pid'} is a FIFO, not a regular file: its pid is not read (remove it)"], done.stderr
        status, lines = await run_until_it_exits(env)
        if daemon_running:
            assert status == EXIT_HOME_IN_USE and len(lines) == 1, lines
            assert lines[0].startswith(f"chatgate cannot start: another chatgate is running on {home}"), lines
        else:
            assert status == 1 and len(lines) == 1, lines
            assert lines[0].startswith(f"chatgate cannot start: cannot lock {home / 'chatgate.pid'}: not a regular"), \
                lines
    finally:
        if holder is not None:
            holder.kill()
            holder.wait()
