"""A storage error is never a "not answered": the turn waits for the store, `/readyz` tells the truth, and
no unit of work can wedge the writer (issue 33, points 5, 6 and 9).

Against a real `chatgate run`: another program's lock is the real `sqlite3` shell; a full disk is a small
tmpfs mounted for `CHATGATE_HOME` (as root) and filled with a file, then freed. What the gateway does with
the start of an answer before its end is ordered by the fake model holding the rest of its stream back.
"""

from __future__ import annotations

import asyncio
import errno
import os
import subprocess
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import aiosqlite
import pytest

from gateway.storage import Store
from tests.fakes.llm import FakeLLM
from tests.fakes.telegram import FakeTelegram
from tests.harness import ANN, Daemon, eventually, free_port, sent_texts, telegram_settings, web_message


async def readyz(port: int) -> tuple[int, dict[str, Any]]:
    async with aiohttp.ClientSession() as http, http.get(f"http://127.0.0.1:{port}/readyz") as response:
        return response.status, await response.json()


async def _failing(port: int, why: str) -> bool:
    status, body = await readyz(port)
    return status == 503 and body["storage"]["state"] == "failing" and why in body["storage"]["error"]


async def _ready(port: int) -> bool:
    status, body = await readyz(port)
    return status == 200 and body["storage"]["state"] == "ready"


@asynccontextmanager
async def chatgate(home: Path, tg: FakeTelegram, port: int,
                   **settings: Any) -> AsyncIterator[tuple[Daemon, FakeLLM]]:
    """`chatgate run` on Telegram and a fake model, its /readyz and /metrics on `port`; its output beside
    `home` (which may be a small disk)."""
    async with FakeLLM() as llm:
        daemon = Daemon(home, llm, telegram_settings(tg, http__port=port, **settings), logs=home.parent)
        try:
            daemon.start()
            yield daemon, llm
        finally:
            daemon.close()


def one_row(daemon: Daemon, sql: str) -> Any:
    found = daemon.rows(sql)
    return found[0][0] if found else None


# -- point 6: a full disk ------------------------------------------------------------


class SmallDisk:
    """A tmpfs of a few MB at `path` (mounted as root), filled by a file and freed again."""

    def __init__(self, path: Path, megabytes: int) -> None:
        self.path, self.megabytes = path, megabytes
        self.filler = path / "filler"

    def __enter__(self) -> "SmallDisk":
        assert os.geteuid() == 0, "a small disk is a tmpfs mounted for the test: run as root (as CI does)"
        self.path.mkdir()
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={self.megabytes}m,mode=0700", "tmpfs", str(self.path)],
                       check=True)
        return self

    def __exit__(self, *exc: object) -> None:
        subprocess.run(["umount", "--lazy", str(self.path)], check=True)

    async def fill(self) -> None:
        """Write a file until the disk is full (it stays so until `free`)."""
        def fill() -> None:
            fd = os.open(self.filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            try:
                while True:  # (the last write is short: it takes what is left)
                    os.write(fd, b"\0" * 65536)
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
            finally:
                os.close(fd)

        await asyncio.to_thread(fill)

    def free(self) -> None:
        self.filler.unlink()


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[SmallDisk]:
    with SmallDisk(tmp_path / "home", megabytes=16) as disk:
        yield disk


async def test_readyz_says_storage_is_failing_when_the_disk_fills_up_with_no_traffic(
        tmp_path: Path, tg: FakeTelegram, small_disk: SmallDisk) -> None:
    port = free_port()
    async with chatgate(small_disk.path, tg, port) as (daemon, _):
        tg.user_message("warm up")
        await tg.wait_until(lambda: sent_texts(tg, ANN) == ["echo: warm up"], 20)
        await eventually(lambda: one_row(daemon, "SELECT state FROM inbox") == "done", 10, "the warm-up done")
        assert (await readyz(port))[0] == 200
        await small_disk.fill()  # nothing writes now: only /readyz can find out
        await eventually(lambda: _failing(port, "full"), 20, "/readyz saying the disk is full")
        small_disk.free()
        await eventually(lambda: _ready(port), 20, "/readyz ready again")


# -- point 9: a unit of work that raises CancelledError -------------------------------------


async def _cancels(db: aiosqlite.Connection) -> None:
    """A unit that writes, then is cancelled inside its transaction (an await of its own cut off)."""
    await db.execute("INSERT INTO gateway_instances VALUES ('x', 'h', 1, 0, 0)")
    raise asyncio.CancelledError


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    opened = await Store.open(tmp_path / "state.db")
    yield opened
    await opened.close()


async def the_next_write_commits(store: Store, path: Path) -> None:
    """A write of its own transaction (its BEGIN refused while one is left open) commits: another connection
    sees it, and nothing of what was cancelled."""
    async def instance(db: aiosqlite.Connection) -> int:
        await db.execute("INSERT INTO gateway_instances VALUES ('y', 'h', 2, 0, 0)")
        return 1

    assert await asyncio.wait_for(store.write(instance), 10) == 1
    async with aiosqlite.connect(path) as other:
        assert await other.execute_fetchall("SELECT pid FROM gateway_instances") == [(2,)]


@pytest.mark.parametrize("batch", [1, 6])
async def test_a_unit_cancelled_inside_a_batch_is_rolled_back_and_the_writer_goes_on(
        tmp_path: Path, store: Store, batch: int) -> None:
    others = [store.inbox.add(web_message(n), "k") for n in range(batch - 1)]
    outcomes = await asyncio.wait_for(asyncio.gather(store.write(_cancels), *others, return_exceptions=True), 10)
    assert isinstance(outcomes[0], RuntimeError) and "cancelled" in str(outcomes[0]), outcomes
    assert all(isinstance(o, int) for o in outcomes[1:]), outcomes  # the rest of the batch committed
    await the_next_write_commits(store, tmp_path / "state.db")
    assert (await store.fetch_one("SELECT count(*) FROM inbox"))[0] == batch - 1


async def test_a_single_statement_unit_cancelled_settles_its_caller(tmp_path: Path, store: Store) -> None:
    async def cancelled(db: aiosqlite.Connection) -> None:
        raise asyncio.CancelledError

    with pytest.raises(RuntimeError, match="cancelled"):
        await asyncio.wait_for(store.write(cancelled, single=True), 10)
    await the_next_write_commits(store, tmp_path / "state.db")


async def test_a_read_cancelled_inside_a_transaction_leaves_none_open(tmp_path: Path, store: Store) -> None:
    async def opens_and_is_cancelled(db: aiosqlite.Connection) -> None:
        await db.execute("BEGIN IMMEDIATE")
        await _cancels(db)

    with pytest.raises(asyncio.CancelledError):
        await store.read(opens_and_is_cancelled)
    await the_next_write_commits(store, tmp_path / "state.db")
