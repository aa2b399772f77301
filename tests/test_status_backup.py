"""`chatgate status` beside a running daemon and without one, and `chatgate backup` while it runs."""

from __future__ import annotations

import json
import os
import sqlite3
import stat
import subprocess
import sys
import tarfile
from pathlib import Path

from tests.fakes.llm import FakeLLM
from tests.harness import Daemon, Tab, eventually, free_port, gateway_env


async def test_status_and_backup_of_a_running_daemon(tmp_path: Path):
    async with FakeLLM() as llm:
        daemon = Daemon(tmp_path, llm, {"http__port": free_port()})
        (tmp_path / "config.yaml").write_text("gateway:\n  tick_seconds: 60\n")
        try:
            assert daemon.cli("status").returncode == 3  # nothing yet
            daemon.start()
            log = tmp_path / "gateway-1.log"
            await eventually(lambda: log.exists() and "chatgate is running" in log.read_text(), 30, "start-up")
            done = daemon.cli("status", "--json")
            report = json.loads(done.stdout)
            assert done.returncode == 0, done.stdout + done.stderr
            assert report["running"] and report["ready"] and report["platforms"]["webchat"]["state"] == "ready"
            assert report["instances"][0]["pid"] == daemon.process.pid  # type: ignore[union-attr]
            assert report["queue"] == {"waiting": 0, "running": 0, "outbox_pending": 0}
            assert "chatgate is running" in daemon.cli("status").stdout

            archive = tmp_path / "out" / "backup.tar.gz"
            archive.parent.mkdir()
            done = daemon.cli("backup", str(archive))
            assert done.returncode == 0, done.stderr
            assert stat.S_IMODE(archive.stat().st_mode) == 0o600
            with tarfile.open(archive) as tar:
                assert {"state.db", "config.yaml"} <= set(tar.getnames())
                tar.extractall(tmp_path / "restored", filter="data")
            with sqlite3.connect(tmp_path / "restored" / "state.db") as db:
                assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
                assert db.execute("SELECT count(*) FROM gateway_instances").fetchone()[0] == 1
            daemon.kill()
            done = daemon.cli("status")
            assert done.returncode == 3 and "not running" in done.stdout
        finally:
            daemon.close()


async def test_status_lists_what_waits_and_the_last_errors(tmp_path: Path, llm: FakeLLM):
    from tests.harness import start_gateway

    runner = await start_gateway(tmp_path, llm.base_url)
    try:
        await runner.parts.store.inbox.dead_letter("telegram", "42", "{}", "ValueError: bad update")
        async with Tab(runner) as tab:
            await tab.say("hello")
            await tab.reply()
        env = {**os.environ, **gateway_env(tmp_path, llm.base_url)}
        done = subprocess.run([sys.executable, "-m", "gateway", "status"], capture_output=True, text=True,
                              env=env, timeout=60)
        assert "1 dead letters" in done.stdout and "ValueError: bad update" in done.stdout
        assert "0 waiting, 0 running" in done.stdout
    finally:
        await runner.stop()
