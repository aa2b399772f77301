"""The adapter contract and its helpers: the base class, the registry, supervised loops, rate limits."""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path

import pytest

from gateway.chat.files import prune_files
from gateway.chat.turns import describe_call, interrupted_text
from gateway.config import load_config
from gateway.ops.logs import RedactingFormatter
from platforms.base import ChatRef, PlatformAdapter, Reply
from platforms.loops import supervise, wait_event
from platforms.ratelimit import RateLimits
from platforms.registry import specs


class Incomplete(PlatformAdapter):
    name = "incomplete"

    async def _start(self) -> None: ...

    async def _stop(self) -> None: ...

    async def send(self, chat: ChatRef, reply: Reply) -> str:
        return "1"


def test_an_adapter_missing_a_method_fails_when_it_is_made_not_when_it_is_used() -> None:
    with pytest.raises(TypeError, match="abstract method edit"):
        Incomplete()  # type: ignore[abstract]


def test_every_platform_package_declares_its_config_and_the_config_follows() -> None:
    known = specs()
    assert {"telegram", "webchat"} <= set(known)
    config = load_config(env={"CHATGATE_HOME": "/nonexistent", "TELEGRAM_BOT_TOKEN": "1:abc",
                              "CHATGATE_PLATFORMS__WEBCHAT__ACK_TIMEOUT_SECONDS": "3"})
    assert set(config.platforms.sections()) == set(known)
    assert config.platforms.telegram.configured and config.platforms.webchat.ack_timeout_seconds == 3


def test_a_platform_opens_a_dm_by_user_id_unless_it_knows_better() -> None:
    class Plain(Incomplete):
        async def edit(self, chat: ChatRef, message_id: str, reply: Reply) -> None: ...

    assert asyncio.run(Plain().open_dm("42")) == ChatRef("incomplete", "42")


async def test_a_supervised_loop_comes_back_after_an_error_and_says_so() -> None:
    runs: list[int] = []
    downs: list[str] = []
    done = asyncio.Event()

    async def body() -> None:
        runs.append(len(runs))
        if len(runs) < 3:
            raise OSError(f"disk full {len(runs)}")
        done.set()

    await asyncio.wait_for(supervise("test-loop", body, on_down=downs.append, first_pause=0.01), 5)
    assert runs == [0, 1, 2] and downs == ["OSError: disk full 1", "OSError: disk full 2"] and done.is_set()


async def test_a_supervised_loop_stops_when_cancelled() -> None:
    started = asyncio.Event()

    async def body() -> None:
        started.set()
        await asyncio.Event().wait()

    task = asyncio.create_task(supervise("forever", body))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_wait_event_does_not_swallow_a_cancellation_that_meets_the_event() -> None:
    event = asyncio.Event()

    async def waiter() -> None:
        while True:
            await wait_event(event, 60)

    task = asyncio.create_task(waiter())
    await asyncio.sleep(0)
    event.set()  # the wait ends and the cancel arrives in the same step
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 5)


async def test_a_429_pauses_one_chat_and_the_overall_rate_is_kept() -> None:
    now = [100.0]
    limits = RateLimits(per_second=2, burst=2, clock=lambda: now[0])
    limits.pause("a", 5)
    assert limits.paused_for("a") == 5 and limits.paused_for("b") == 0
    now[0] += 5
    assert limits.paused_for("a") == 0
    await limits.take()
    await limits.take()  # the burst
    assert limits._tokens < 1  # a third send would wait for the bucket to refill


def test_log_lines_are_redacted_whole_tracebacks_included() -> None:
    formatter = RedactingFormatter("%(levelname)s %(message)s", ["sk-very-secret-key"])
    try:
        raise RuntimeError("the server said: bad key sk-very-secret-key")
    except RuntimeError:
        record = logging.LogRecord("x", logging.ERROR, __file__, 1, "failed with %s", ("sk-very-secret-key",),
                                   exc_info=__import__("sys").exc_info())
    line = formatter.format(record)
    assert "Traceback" in line and "RuntimeError" in line
    assert "sk-very-secret-key" not in line and line.count("***") >= 2


def test_a_tool_call_is_described_in_one_line() -> None:
    assert describe_call("terminal", '{"command": "make\\n deploy"}') == "terminal: make deploy"
    assert describe_call("write_file", '{"path": "a.txt", "content": "x"}') == "write_file: a.txt"
    assert describe_call("cron", "not json") == "cron: not json"
    assert len(describe_call("terminal", '{"command": "' + "x" * 500 + '"}')) == 200
    text = interrupted_text(tuple(f"terminal: step {i}" for i in range(12)))
    assert "• terminal: step 9" in text and "step 10" not in text and "… and 2 more" in text


def test_old_received_files_are_pruned_and_new_ones_kept(tmp_path: Path) -> None:
    old = tmp_path / "telegram" / "1" / "old.jpg"
    new = tmp_path / "telegram" / "2" / "new.jpg"
    for path in (old, new):
        path.parent.mkdir(parents=True)
        path.write_bytes(b"x")
    week_ago = time.time() - 7 * 86400
    import os
    os.utime(old, (week_ago, week_ago))
    assert prune_files(tmp_path, time.time() - 86400) == 1
    assert not old.exists() and not old.parent.exists() and new.exists()
