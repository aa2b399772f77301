"""The disk an upgrade takes. Migration 016 rebuilds the inbox (SQLite cannot change a table's unique keys
in place): its rows are moved a thousand at a time into the new table, so the file does not grow by a second
copy; the room that needs (the copy passes through the WAL) is measured before it starts, and too little is
refused in one line with the database untouched; once it has committed, the WAL is emptied at once.

The disks here are real: a tmpfs of a chosen size, mounted in a mount namespace of the test's own."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path

import pytest

from gateway.storage import Store
from gateway.storage.schema import migrations
from tests.harness import gateway_env
from tests.test_migrations import made_by_release, schema, version

ROOT = Path(__file__).resolve().parents[1]
UNSHARE = ["unshare", "--mount"] if os.geteuid() == 0 else ["unshare", "--map-root-user", "--mount"]

LATEST = migrations()[-1][0]  # (the upgrade goes on past 016 to the newest)


def release_15_with_an_inbox(path: Path, rows: int) -> int:
    """A database as release 15 left it, `rows` answered messages in its inbox; its size."""
    made_by_release(path, 15)
    with closing(sqlite3.connect(path, isolation_level=None)) as db:
        db.execute("WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?) "
                   "INSERT INTO inbox (platform, chat_id, platform_message_id, session_key, payload, state, "
                   "received_at, updated_at) SELECT 'telegram', i % 50, i, 'telegram:' || (i % 50), "
                   "json_object('text', 'message ' || i || ': ' || printf('%.300c', 'x')), 'done', i, i FROM n",
                   (rows,))
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return path.stat().st_size


def wal(path: Path) -> int:
    return Path(f"{path}-wal").stat().st_size if Path(f"{path}-wal").exists() else 0


@pytest.mark.parametrize("vacuum", ["none", "incremental"])
async def test_an_upgrade_leaves_the_file_its_size_and_empties_the_wal_at_once(tmp_path: Path, vacuum: str):
    path = tmp_path / "state.db"
    with closing(sqlite3.connect(path)) as db:  # (auto_vacuum is set before the first table)
        db.execute(f"PRAGMA auto_vacuum = {vacuum}")
        db.execute("PRAGMA journal_mode = WAL")
    before = release_15_with_an_inbox(path, 20_000)
    with closing(sqlite3.connect(path)) as db:
        assert db.execute("PRAGMA auto_vacuum").fetchone()[0] == {"none": 0, "incremental": 2}[vacuum]
    store = await Store.open(path)
    try:  # (open, as a daemon goes on with it)
        assert path.stat().st_size < 1.1 * before and wal(path) == 0, (before, path.stat().st_size, wal(path))
        [(count, first, last, goals)] = await store.fetch(
            "SELECT count(*), min(id), max(id), sum(origin != 'person') FROM inbox")
        assert (count, first, last, goals) == (20_000, 1, 20_000, 0)
        row = await store.fetchrow("SELECT chat_id, platform_message_id, received_at FROM inbox WHERE id = 777")
        assert tuple(row) == ("27", "777", 777.0)
    finally:
        await store.close()
    assert version(path) == LATEST


def on_a_disk_of(size: int, home: Path, command: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """`chatgate <command>` with its home on a tmpfs of `size` bytes (what `home` holds copied onto it);
    then the home's files are copied back, the tmpfs gone with the namespace."""
    if shutil.which("unshare") is None or subprocess.run([*UNSHARE, "true"], capture_output=True).returncode:
        pytest.skip("needs unshare and a mount namespace (root, or user namespaces)")
    saved = home.with_name("saved")
    home.rename(saved)
    home.mkdir()
    script = ('size=$1 disk=$2 saved=$3; shift 3; '
              'mount -t tmpfs -o "size=$size,mode=0700" chatgate-test "$disk" && cp -a "$saved/." "$disk/" || exit 99; '
              '"$@"; status=$?; rm -rf "$saved" && mkdir "$saved" && cp -a "$disk/." "$saved/"; exit $status')
    done = subprocess.run([*UNSHARE, "sh", "-c", script, "sh", str(size), str(home), str(saved), sys.executable, "-m",
                           "gateway", *command], env=env, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode != 99, done.stderr
    shutil.rmtree(home)
    saved.rename(home)
    return done


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_an_upgrade_fits_on_a_disk_with_room_for_one_more_copy_of_the_inbox(tmp_path: Path):
    home = tmp_path / "home"
    home.mkdir()
    size = release_15_with_an_inbox(home / "state.db", 20_000)
    env = {**os.environ, **gateway_env(home, None)}
    done = on_a_disk_of(int(size * 2.4), home, ["sessions", "list"], env)  # its own size, and 1.4 times more free
    assert done.returncode == 0, done.stdout + done.stderr
    assert version(home / "state.db") == LATEST


async def test_an_upgrade_without_the_room_is_refused_before_it_starts(tmp_path: Path):
    home = tmp_path / "home"
    home.mkdir()
    size = release_15_with_an_inbox(home / "state.db", 20_000)
    before = digest(home / "state.db"), schema(home / "state.db")
    env = {**os.environ, **gateway_env(home, "http://127.0.0.1:9/v1")}
    done = on_a_disk_of(int(size * 1.6), home, ["run"], env)  # free: 0.6 times its size
    lines = (done.stdout + done.stderr).splitlines()
    assert done.returncode == 1 and len(lines) == 1, lines
    assert lines[0].startswith(f"chatgate cannot start: {home / 'state.db'}: upgrading it rewrites its inbox table "
                               "(migration 016), which needs "), lines
    assert lines[0].endswith(" MiB are free: make room, then start again (the database is left as it was, at "
                             "schema version 15)"), lines
    found = re.search(r"needs (\d+) MiB free on its disk, and (\d+) MiB are free", lines[0])
    assert found is not None, lines
    need, free = int(found.group(1)), int(found.group(2))
    assert free < need and size / 2**20 < need < 1.3 * size / 2**20, (need, free, size)
    assert (digest(home / "state.db"), schema(home / "state.db")) == before  # untouched
