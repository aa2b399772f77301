"""A storage error is never a "not answered": the turn waits for the store, `/readyz` tells the truth, and
no unit of work can wedge the writer (issue 33, points 5, 6 and 9).

Against a real `chatgate run`: another program's lock is the real `sqlite3` shell; a full disk is a small
tmpfs mounted for `CHATGATE_HOME` (as root) and filled with a file, then freed. What the gateway does with
the start of an answer before its end is ordered by the fake model holding the rest of its stream back.
"""

from __future__ import annotations

import asyncio
import errno
import html
import os
import re
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from gateway.storage import Store
from gateway.storage.connection import Connection
from tests.engines import OpenStore
from tests.fakes.llm import FakeLLM, Reply
from tests.fakes.telegram import FakeTelegram
from tests.harness import ANN, Daemon, Shell, eventually, free_port, sent_texts, telegram_settings, web_message

FAST = {"gateway__lock_wait_seconds": 0.5}  # a write waits this long for another program's lock, then fails
ANSWER = "Here is the whole answer, held back by the store until it could be recorded."
WENT_WRONG = "Something went wrong"


async def readyz(port: int) -> tuple[int, dict[str, Any]]:
    async with aiohttp.ClientSession() as http, http.get(f"http://127.0.0.1:{port}/readyz") as response:
        return response.status, await response.json()


async def metric(port: int, line: str) -> float:
    """The value of the /metrics line that starts `line` (0 when there is none)."""
    async with aiohttp.ClientSession() as http, http.get(f"http://127.0.0.1:{port}/metrics") as page:
        found = re.search(rf"^{re.escape(line)} (\S+)$", await page.text(), re.MULTILINE)
    return float(found.group(1)) if found else 0.0


async def held_or_failed(port: int) -> bool:
    """A write of the turn was refused: the turn waits for the store, or (before issue 33) it failed."""
    return await metric(port, "chatgate_storage_waiting") >= 1 \
        or await metric(port, 'chatgate_turns_total{outcome="error"}') >= 1


async def storage_failing(port: int, why: str) -> bool:
    status, body = await readyz(port)
    return status == 503 and body["storage"]["state"] == "failing" and why in body["storage"]["error"]


async def storage_ready(port: int) -> bool:
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


async def a_turn_held_at_its_commit(daemon: Daemon, tg: FakeTelegram, llm: FakeLLM, port: int,
                                    fault: Callable[[], Awaitable[None]]) -> None:
    """A message whose answer streams into the preview; once the preview's id is recorded, `fault()`
    (a lock taken, a disk filled), then the rest of the answer: the turn's commit meets the fault."""
    go = asyncio.Event()
    llm.script(Reply.text(ANSWER, chunk_size=12, hold=go))
    tg.user_message("the question")
    await tg.wait_for("sendMessage", timeout=20)  # the preview, with the answer's first piece
    await eventually(lambda: one_row(daemon, "SELECT draft_message_id FROM inbox"), 10, "the preview's id recorded")
    await fault()
    go.set()
    await held_not_failed(daemon, tg, port)


async def held_not_failed(daemon: Daemon, tg: FakeTelegram, port: int) -> None:
    """A write of the turn was refused for the storage's sake: the turn waits, it did not fail."""
    await eventually(lambda: held_or_failed(port), 20, "the turn's write refused")
    assert await metric(port, 'chatgate_turns_total{outcome="error"}') == 0  # not taken for the message's fault
    assert await metric(port, "chatgate_storage_waiting") == 1
    assert not [t for t in sent_texts(tg, ANN) if WENT_WRONG in t]
    assert one_row(daemon, "SELECT state FROM inbox") in ("received", "processing")


async def answered_once(daemon: Daemon, tg: FakeTelegram, port: int) -> None:
    """The held answer went out editing the preview: one message, reading the whole answer; the row done."""
    await eventually(lambda: one_row(daemon, "SELECT state FROM inbox") == "done", 20, "the turn recorded")
    await tg.wait_until(lambda: sent_texts(tg, ANN) == [ANSWER], 10, lambda: f"the answer: {sent_texts(tg, ANN)}")
    assert len(tg.calls_to("sendMessage")) == 1  # the preview, edited: never a second message
    await eventually(lambda: one_row(daemon, "SELECT count(*) FROM outbox WHERE state = 'sent'") == 1, 10,
                     "the delivery recorded")
    await eventually(lambda: storage_ready(port), 10, "/readyz ready again")
    assert (await readyz(port))[1]["storage"]["waiting"] == 0
    assert await metric(port, "chatgate_storage_waiting") == 0


# -- point 5: another program's lock at the turn's commit ------------------------------------


async def test_a_lock_held_past_the_wait_at_the_commit_holds_the_answer_and_sends_it_once(
        tmp_path: Path, tg: FakeTelegram) -> None:
    home, port = tmp_path / "home", free_port()
    async with chatgate(home, tg, port, **FAST) as (daemon, llm), Shell(home / "state.db", locked=False) as shell:
        await a_turn_held_at_its_commit(daemon, tg, llm, port, shell.lock)
        status, body = await readyz(port)
        assert status == 503 and body["storage"]["state"] == "failing"
        assert "locked by another program" in body["storage"]["error"] and body["storage"]["waiting"] == 1
        await shell.release()
        await answered_once(daemon, tg, port)
        assert len(llm.requests) == 1  # kept in memory, not asked again


async def test_stopped_while_its_answer_waits_the_turn_is_reported_at_the_next_start_not_run_twice(
        tmp_path: Path, tg: FakeTelegram) -> None:
    home, workspace, port = tmp_path / "home", tmp_path / "ws", free_port()
    async with chatgate(home, tg, port, agent__workspace=workspace, **FAST) as (daemon, llm), \
            Shell(home / "state.db", locked=False) as shell:
        llm.script(Reply.tool_calls([("terminal", {"command": "echo ran >> ran.txt"})]))
        await a_turn_held_at_its_commit(daemon, tg, llm, port, shell.lock)
        assert (workspace / "ran.txt").read_text() == "ran\n"
        assert await daemon.terminate() == 0  # drained: the held turn is cut off, its row left unfinished
        assert one_row(daemon, "SELECT state FROM inbox") == "processing"
        await shell.release()
        daemon.start()
        await tg.wait_until(lambda: any("I was interrupted" in t for t in sent_texts(tg, ANN)), 20,
                            lambda: f"the report: {sent_texts(tg, ANN)}")
        [shown] = sent_texts(tg, ANN)  # the preview, edited into the report
        assert "terminal: echo ran >> ran.txt" in html.unescape(shown)
        assert len(tg.calls_to("sendMessage")) == 1
        assert (workspace / "ran.txt").read_text() == "ran\n"  # not run a second time
        assert len(llm.requests) == 2  # the tool step and the answer: the turn was not run again
        await eventually(lambda: one_row(daemon, "SELECT state FROM inbox") == "interrupted", 10, "the row")


async def test_a_tool_whose_journal_entry_meets_a_lock_waits_for_it_and_then_runs_once(
        tmp_path: Path, tg: FakeTelegram) -> None:
    home, workspace, port = tmp_path / "home", tmp_path / "ws", free_port()
    async with chatgate(home, tg, port, agent__workspace=workspace, **FAST) as (daemon, llm), \
            Shell(home / "state.db", locked=False) as shell:
        go = asyncio.Event()
        llm.script(Reply.tool_calls([("terminal", {"command": "echo ran >> ran.txt"})], hold=go),
                   Reply.text("It ran."))
        tg.user_message("run it")
        await llm.wait_for_requests(1, timeout=20)
        await shell.lock()  # the call is noted before the tool runs: that note meets the lock
        go.set()
        await held_not_failed(daemon, tg, port)
        assert not (workspace / "ran.txt").exists()  # not run while it could not be noted
        await shell.release()
        await tg.wait_until(lambda: sent_texts(tg, ANN) == ["It ran."], 20, lambda: f"{sent_texts(tg, ANN)}")
        assert (workspace / "ran.txt").read_text() == "ran\n"
        assert len(llm.requests) == 2
        await eventually(lambda: one_row(daemon, "SELECT state FROM inbox") == "done", 10, "the turn recorded")
        assert one_row(daemon, "SELECT effects FROM inbox") == '["terminal: echo ran >> ran.txt"]'


async def test_a_turn_that_meets_a_lock_at_its_start_waits_for_it_and_is_answered_once(
        tmp_path: Path, tg: FakeTelegram) -> None:
    home, port = tmp_path / "home", free_port()
    async with chatgate(home, tg, port, **FAST) as (daemon, llm), \
            Shell(home / "state.db", locked=False) as shell:
        fetching = tg.hold_next("getFile")  # the turn's first step: its attachment downloaded
        tg.user_message("read this", document=("notes.txt", b"some notes"))
        await tg.wait_for("getFile", lambda c: c.status == -2, timeout=20)
        await shell.lock()  # then its session is made: that write meets the lock
        fetching.set()
        await held_not_failed(daemon, tg, port)
        assert not llm.requests
        await shell.release()
        await tg.wait_until(lambda: len(sent_texts(tg, ANN)) == 1, 20)
        [answer] = sent_texts(tg, ANN)
        assert answer.startswith("echo: read this") and "notes.txt" in answer
        await eventually(lambda: one_row(daemon, "SELECT state FROM inbox") == "done", 10, "the turn recorded")
        assert len(llm.requests) == 1


# -- points 5 and 6: a full disk ------------------------------------------------------------


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
        await eventually(lambda: storage_failing(port, "full"), 20, "/readyz saying the disk is full")
        small_disk.free()
        await eventually(lambda: storage_ready(port), 20, "/readyz ready again")


async def test_a_full_disk_at_the_commit_holds_the_answer_until_space_returns_then_sends_it_once(
        tmp_path: Path, tg: FakeTelegram, small_disk: SmallDisk) -> None:
    port = free_port()
    async with chatgate(small_disk.path, tg, port) as (daemon, llm):
        await a_turn_held_at_its_commit(daemon, tg, llm, port, small_disk.fill)
        assert await storage_failing(port, "full")
        small_disk.free()  # no restart: the held answer is recorded and sent
        await answered_once(daemon, tg, port)
        assert len(llm.requests) == 1


# -- point 9: a unit of work that raises CancelledError -------------------------------------


async def _cancels(db: Connection) -> None:
    """A unit that writes, then is cancelled inside its transaction (an await of its own cut off)."""
    await db.execute("INSERT INTO gateway_instances VALUES ('x', 'h', 1, 0, 0)")
    raise asyncio.CancelledError


@pytest.fixture
async def store(open_store: OpenStore) -> Store:
    return await open_store()


async def the_next_write_commits(store: Store, open_store: OpenStore) -> None:
    """A write of its own transaction (its BEGIN refused while one is left open) commits: another connection
    sees it, and nothing of what was cancelled."""
    async def instance(db: Connection) -> int:
        await db.execute("INSERT INTO gateway_instances VALUES ('y', 'h', 2, 0, 0)")
        return 1

    assert await asyncio.wait_for(store.write(instance), 10) == 1
    other = await open_store()
    assert [r["pid"] for r in await other.fetch("SELECT pid FROM gateway_instances")] == [2]


@pytest.mark.parametrize("batch", [1, 6])
async def test_a_unit_cancelled_inside_a_batch_is_rolled_back_and_the_writer_goes_on(
        open_store: OpenStore, store: Store, batch: int) -> None:
    others = [store.inbox.add(web_message(n), "k") for n in range(batch - 1)]
    outcomes = await asyncio.wait_for(asyncio.gather(store.write(_cancels), *others, return_exceptions=True), 10)
    assert isinstance(outcomes[0], RuntimeError) and "cancelled" in str(outcomes[0]), outcomes
    assert all(isinstance(o, int) for o in outcomes[1:]), outcomes  # the rest of the batch committed
    await the_next_write_commits(store, open_store)
    assert await store.fetchval("SELECT count(*) FROM inbox") == batch - 1


async def test_a_single_statement_unit_cancelled_settles_its_caller(open_store: OpenStore, store: Store) -> None:
    async def cancelled(db: Connection) -> None:
        raise asyncio.CancelledError

    with pytest.raises(RuntimeError, match="cancelled"):
        await asyncio.wait_for(store.write(cancelled, single=True), 10)
    await the_next_write_commits(store, open_store)


async def test_a_read_cancelled_inside_a_transaction_leaves_none_open(open_store: OpenStore, store: Store) -> None:
    async def opens_and_is_cancelled(db: Connection) -> None:
        await db.execute("BEGIN")
        await _cancels(db)

    with pytest.raises(asyncio.CancelledError):
        await store.read(opens_and_is_cancelled)
    await the_next_write_commits(store, open_store)
