"""`chatgate logs`, run as an operator runs it: with a chatgate unit installed it becomes `journalctl`
(a fake one on PATH records what it was given, and its pid: the same process, so -f and Ctrl-C are
journalctl's own); with a log file in the home it shows it, filtered by priority and followed; inside
a container it says where the log is."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

LINES = [
    "2026-11-29 01:00:00,001 INFO chatgate: chatgate is running\n",
    "2026-11-29 01:00:01,002 WARNING gateway.connections [platform=telegram]: telegram is down: retrying\n",
    "2026-11-29 01:00:02,003 ERROR gateway.chat.turns [platform=telegram chat=1 session=2 turn=3]: the turn failed\n",
    "Traceback (most recent call last):\n",
    "  RuntimeError: boom\n",
    '{"time": "2026-11-29T01:00:03.004", "level": "DEBUG", "logger": "gateway.tick", "message": "tick"}\n',
    "<6>INFO gateway.chat.delivery: sent\n",
]


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """No chatgate unit (an empty XDG_CONFIG_HOME), a home of its own, a bin folder first on PATH."""
    (tmp_path / "bin").mkdir()
    return {**{k: v for k, v in os.environ.items() if k not in ("container", "XDG_CONFIG_HOME")},
            "CHATGATE_HOME": str(tmp_path / "home"), "XDG_CONFIG_HOME": str(tmp_path / "xdg"),
            "PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}"}


def chatgate(env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "gateway", "logs", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)


def fake_journalctl(tmp_path: Path) -> Path:
    calls = tmp_path / "journalctl-calls"
    fake = tmp_path / "bin" / "journalctl"
    fake.write_text(f'#!/bin/sh\necho "$$ $*" >> {calls}\necho "-- journal of chatgate --"\n')
    fake.chmod(0o755)
    return calls


def install_user_unit(tmp_path: Path) -> None:
    units = tmp_path / "xdg" / "systemd" / "user"
    units.mkdir(parents=True)
    (units / "chatgate.service").write_text("[Service]\n")


def test_with_a_user_unit_it_becomes_journalctl_for_it(tmp_path: Path, env: dict[str, str]):
    assert not Path("/etc/systemd/system/chatgate.service").exists(), "a system unit here would be read first"
    calls = fake_journalctl(tmp_path)
    install_user_unit(tmp_path)
    process = chatgate(env, "-f", "-n", "20", "-p", "warning")
    out, err = process.communicate(timeout=60)
    assert process.returncode == 0 and out == "-- journal of chatgate --\n", err
    assert calls.read_text() == f"{process.pid} --user -u chatgate -n 20 -f -p warning\n"  # (its own pid: exec)


def test_user_names_the_user_units_journal_and_says_when_there_is_none(tmp_path: Path, env: dict[str, str]):
    calls = fake_journalctl(tmp_path)
    out, err = chatgate(env, "--user").communicate(timeout=60)
    assert err.strip().splitlines() == [
        f"chatgate logs: no chatgate user unit is installed (no {tmp_path}/xdg/systemd/user/chatgate.service): "
        "`chatgate service install --user` makes one"]
    assert not calls.exists()
    install_user_unit(tmp_path)
    process = chatgate(env, "--user", "-p", "3")
    process.communicate(timeout=60)
    assert calls.read_text().split(" ", 1)[1] == "--user -u chatgate -n 50 -p err\n"


def test_a_missing_journalctl_is_one_line(tmp_path: Path, env: dict[str, str]):
    install_user_unit(tmp_path)
    process = chatgate({**env, "PATH": str(tmp_path / "bin")}, "--user")
    _, err = process.communicate(timeout=60)
    assert process.returncode == 1
    assert err == "chatgate logs: journalctl is not installed here, and the log is read with it\n"


def test_a_bad_priority_is_refused_by_name(env: dict[str, str]):
    process = chatgate(env, "-p", "loud")
    _, err = process.communicate(timeout=60)
    assert process.returncode == 2
    assert "argument -p/--priority: 'loud' is not a priority: one of emerg, alert, crit, err, warning, notice, " \
           "info, debug or 0-7" in err


def write_log(tmp_path: Path) -> Path:
    log = tmp_path / "home" / "logs" / "chatgate.log"
    log.parent.mkdir(parents=True)
    log.write_text("".join(LINES))
    return log


def test_the_homes_log_file_its_last_lines_and_by_priority(tmp_path: Path, env: dict[str, str]):
    write_log(tmp_path)
    out, err = chatgate(env, "-n", "2").communicate(timeout=60)
    assert out == "".join(LINES[-2:]), err
    out, err = chatgate(env, "-p", "warning").communicate(timeout=60)
    assert out == "".join(LINES[1:5]), err  # the warning, the error and its traceback
    out, _ = chatgate(env, "-p", "info", "-n", "2").communicate(timeout=60)
    assert out == LINES[4] + LINES[6]  # the last two lines shown: the JSON debug line is not
    out, _ = chatgate(env, "-p", "debug", "-n", "2").communicate(timeout=60)
    assert out == LINES[5] + LINES[6]


async def test_following_the_log_file_shows_new_lines_at_the_priority_until_ctrl_c(tmp_path: Path,
                                                                                   env: dict[str, str]):
    log = write_log(tmp_path)
    process = await asyncio.create_subprocess_exec(sys.executable, "-m", "gateway", "logs", "-f", "-p", "err",
                                                   "-n", "1", env=env, stdout=asyncio.subprocess.PIPE)
    assert process.stdout is not None
    try:
        assert await asyncio.wait_for(process.stdout.readline(), 30) == LINES[4].encode()  # the last one at err
        with log.open("a") as more:
            more.write("2026-11-29 02:00:00,000 INFO chatgate: not shown\n")
            more.write("2026-11-29 02:00:01,000 ERROR gateway.chat.delivery: shown\n")
        assert await asyncio.wait_for(process.stdout.readline(), 30) == \
            b"2026-11-29 02:00:01,000 ERROR gateway.chat.delivery: shown\n"
        process.send_signal(signal.SIGINT)
        assert await asyncio.wait_for(process.wait(), 30) == 130
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


def test_inside_a_container_it_says_where_the_log_is(env: dict[str, str]):
    process = chatgate({**env, "container": "docker"})
    out, err = process.communicate(timeout=60)
    assert process.returncode == 1 and out == ""
    assert err.strip().splitlines() == [
        "chatgate logs: inside a container chatgate's log is its output, which the host keeps: there run "
        "`docker compose -f deploy/compose.yaml logs -f chatgate` (or `docker logs -f CONTAINER`)"]
