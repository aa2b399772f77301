"""`chatgate service`: a unit systemd accepts, installed and removed through systemctl, and the
readiness / watchdog / stopping notifications a `Type=notify` unit relies on."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fakes.llm import FakeLLM
from tests.harness import gateway_env

SYSTEMD_ANALYZE = shutil.which("systemd-analyze")


def chatgate(home: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gateway", *args], capture_output=True, text=True,
                          env={**os.environ, **gateway_env(home, None), **(env or {})}, timeout=60)


def verify(unit: Path) -> subprocess.CompletedProcess[str]:
    assert SYSTEMD_ANALYZE, "systemd-analyze is missing: apt-get install systemd (.ci/run does)"
    return subprocess.run([SYSTEMD_ANALYZE, "verify", str(unit)], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("user", [False, True])
def test_the_printed_unit_passes_systemd_analyze_verify(tmp_path: Path, user: bool):
    home = Path("/var/lib") / f"chatgate-test-{os.getpid()}"  # (under /tmp a private /tmp would hide it)
    done = chatgate(home, "service", "install", "--print", *(["--user"] if user else []))
    assert done.returncode == 0, done.stderr
    unit = tmp_path / "chatgate.service"
    unit.write_text(done.stdout)
    checked = verify(unit)
    assert checked.returncode == 0 and checked.stderr.strip() == "", checked.stderr  # no warning either
    text = done.stdout
    assert "Type=notify" in text and "WatchdogSec=" in text and "Restart=on-failure" in text
    assert "SyslogIdentifier=chatgate" in text.splitlines()  # journalctl -t chatgate, not python3[pid]
    assert "RestartPreventExitStatus=78" in text.splitlines()  # every platform refused for good: no loop
    assert f'Environment="CHATGATE_HOME={home}"' in text and f"ReadWritePaths={home}" in text
    assert f"ExecStart={sys.executable} -m gateway run" in text
    assert ("User=" in text) is not user and ("WantedBy=default.target" in text) is user
    assert not home.exists()  # printing changes nothing


def test_install_and_uninstall_go_through_systemctl(tmp_path: Path):
    calls = tmp_path / "calls"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "systemctl"
    fake.write_text(f'#!/bin/sh\necho "$@" >> {calls}\n')
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}"}
    units = tmp_path / "units"
    home = tmp_path / "home"
    done = chatgate(home, "service", "install", "--user", "--unit-dir", str(units), env=env)
    assert done.returncode == 0, done.stderr
    assert (units / "chatgate.service").read_text().startswith("# Written by `chatgate service install`")
    assert calls.read_text().splitlines() == ["--user daemon-reload", "--user enable --now chatgate.service"]
    assert "journalctl --user -u chatgate -f" in done.stdout and "enable-linger" in done.stdout
    done = chatgate(home, "service", "uninstall", "--user", "--unit-dir", str(units), env=env)
    assert done.returncode == 0, done.stderr
    assert not (units / "chatgate.service").exists()
    assert calls.read_text().splitlines()[2:] == ["--user disable --now chatgate.service", "--user daemon-reload"]


def test_a_failing_systemctl_is_one_line_not_a_traceback(tmp_path: Path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "systemctl"
    fake.write_text("#!/bin/sh\necho 'Failed to connect to bus: No medium found' >&2\nexit 1\n")
    fake.chmod(0o755)
    done = chatgate(tmp_path / "home", "service", "install", "--unit-dir", str(tmp_path / "u"),
                    env={"PATH": f"{bin_dir}:{os.environ['PATH']}"})
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "Failed to connect to bus" in done.stderr and len(done.stderr.strip().splitlines()) == 1


async def test_run_tells_systemd_ready_feeds_the_watchdog_and_says_stopping(tmp_path: Path):
    address = str(tmp_path / "notify.sock")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(address)
    sock.setblocking(False)
    loop = asyncio.get_running_loop()
    async with FakeLLM() as llm:
        env = {**os.environ, **gateway_env(tmp_path, llm.base_url), "NOTIFY_SOCKET": address,
               "WATCHDOG_USEC": "200000"}
        process = await asyncio.create_subprocess_exec(sys.executable, "-m", "gateway", "run", env=env,
                                                       stdout=asyncio.subprocess.DEVNULL,
                                                       stderr=asyncio.subprocess.DEVNULL)
        try:
            received: list[str] = []

            async def until(state: str, times: int = 1) -> None:
                while sum(state in r for r in received) < times:
                    received.append((await asyncio.wait_for(loop.sock_recv(sock, 4096), 30)).decode())

            await until("READY=1")
            await until("WATCHDOG=1", times=3)  # fed again and again, not once
            process.send_signal(signal.SIGTERM)
            await until("STOPPING=1")
            assert await asyncio.wait_for(process.wait(), 30) == 0
            assert received.index(next(r for r in received if "READY=1" in r)) < \
                received.index(next(r for r in received if "STOPPING=1" in r))
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()
            sock.close()


def test_no_notify_socket_means_nothing_is_sent(monkeypatch):
    from gateway.ops import systemd

    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    monkeypatch.setenv("WATCHDOG_USEC", "30000000")
    monkeypatch.setenv("WATCHDOG_PID", "1")  # another process's watchdog
    assert systemd.notify("READY=1") is False
    assert systemd.watchdog_interval() is None
    monkeypatch.setenv("WATCHDOG_PID", str(os.getpid()))
    assert systemd.watchdog_interval() == 15.0


def fake_systemctl(tmp_path: Path, script: str = "") -> Path:
    """A `systemctl` first on PATH that appends its arguments to the returned file, then runs `script`."""
    calls = tmp_path / "calls"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    fake = bin_dir / "systemctl"
    fake.write_text(f'#!/bin/sh\necho "$@" >> {calls}\n{script}\n')
    fake.chmod(0o755)
    return calls


def installed(tmp_path: Path) -> Path:
    units = tmp_path / "units"
    units.mkdir(exist_ok=True)
    (units / "chatgate.service").write_text("[Service]\n")
    return units


def test_start_stop_and_restart_go_through_systemctl_and_read_no_config(tmp_path: Path):
    calls = fake_systemctl(tmp_path)
    units = installed(tmp_path)
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.yaml").write_text("llm: [this is not a mapping\n")  # (being repaired: stop must still work)
    env = {"PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}"}
    said = [chatgate(home, "service", action, *user, "--unit-dir", str(units), env=env)
            for action, user in (("restart", []), ("stop", ["--user"]), ("start", ["--user"]))]
    assert [(d.returncode, d.stdout, d.stderr) for d in said] == [
        (0, "chatgate restarted; follow it: chatgate logs -f\n", ""),
        (0, "chatgate stopped (running turns finished first)\n", ""),
        (0, "chatgate started; follow it: chatgate logs --user -f\n", "")]
    assert calls.read_text().splitlines() == ["restart chatgate.service", "--user stop chatgate.service",
                                              "--user start chatgate.service"]


def test_no_unit_no_systemctl_or_a_failing_one_is_one_line(tmp_path: Path):
    calls = fake_systemctl(tmp_path, "echo 'Job for chatgate.service failed.' >&2; exit 1")
    env = {"PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}"}
    home = tmp_path / "home"
    done = chatgate(home, "service", "restart", "--unit-dir", str(tmp_path / "nothing"), env=env)
    assert (done.returncode, done.stderr) == (1, f"chatgate service restart: no chatgate unit is installed (no "
                                                 f"{tmp_path}/nothing/chatgate.service): `chatgate service install` "
                                                 "makes one\n")
    assert not calls.exists()  # (nothing asked of systemd for a unit that is not there)
    units = installed(tmp_path)
    done = chatgate(home, "service", "start", "--unit-dir", str(units), env=env)
    assert (done.returncode, done.stderr) == (1, "chatgate service start: systemctl start chatgate.service failed: "
                                                 "Job for chatgate.service failed.\n")
    done = chatgate(home, "service", "stop", "--unit-dir", str(units), env={"PATH": str(tmp_path / "nothing")})
    assert (done.returncode, done.stderr) == (1, "chatgate service stop: systemctl is not here: this machine does not "
                                                 "run systemd (use Docker, see the README)\n")


def test_service_status_shows_systemds_view_then_chatgates(tmp_path: Path):
    calls = fake_systemctl(tmp_path, "echo '● chatgate.service - chatgate'\necho '     Active: inactive (dead)'\nexit 3")
    units = installed(tmp_path)
    done = chatgate(tmp_path / "home", "service", "status", "--unit-dir", str(units),
                    env={"PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}"})
    assert done.returncode == 3, done.stderr  # chatgate's own: not running
    assert done.stdout == ("● chatgate.service - chatgate\n     Active: inactive (dead)\n\n"
                           f"chatgate is not running (home {tmp_path / 'home'})\n")
    assert calls.read_text() == "status --no-pager chatgate.service\n"
