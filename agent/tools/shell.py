"""Running one shell command: in its own session (and in the sandbox when asked), output kept as
head and tail, everything it started killed when it ends, times out or is cancelled."""

from __future__ import annotations

import asyncio
import codecs
import os
import shutil
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent.safety.sandbox import Sandbox
from agent.tools.redaction import Redactor, command_env

KILL_GRACE = 2.0  # seconds to wait for the pipe to close once the process group is killed


class _Output:
    """Combined stdout+stderr, kept as head and tail so a flood of output costs bounded memory."""

    def __init__(self, limit: int) -> None:
        self.limit = max(limit, 200)
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.head = ""
        self.tail = ""
        self.total = 0  # characters decoded so far

    def feed(self, data: bytes, final: bool = False) -> None:
        text = self._decoder.decode(data, final)
        self.total += len(text)
        room = self.limit - len(self.head)
        if room > 0:
            self.head += text[:room]
            text = text[room:]
        if text:
            self.tail = (self.tail + text)[-self.limit:]

    def render(self, redact: Redactor) -> str:
        self.feed(b"", final=True)
        dropped = self.total - len(self.head) - len(self.tail)
        if dropped == 0:
            text = redact(self.head + self.tail)
            if len(text) <= self.limit:
                return text
            head, tail = text, text
        else:
            # a secret cut in two by the dropped middle can't be redacted: drop its pieces as well
            cut_head = redact.partial_suffix(self.head)
            cut_tail = redact.partial_prefix(self.tail)
            head = redact(self.head[:len(self.head) - cut_head])
            tail = redact(self.tail[cut_tail:])
        keep_head = self.limit // 2
        keep_tail = self.limit - keep_head
        shown_head, shown_tail = head[:keep_head], tail[-keep_tail:]
        if dropped == 0:
            cut = len(head) - len(shown_head) - len(shown_tail)
        else:
            cut = self.total - len(shown_head) - len(shown_tail)
        return f"{shown_head}\n[… {cut} characters cut …]\n{shown_tail}"


class _Run(asyncio.SubprocessProtocol):
    """Feeds output into an `_Output`; tells when the shell exited and when the pipe closed."""

    def __init__(self, output: _Output) -> None:
        loop = asyncio.get_running_loop()
        self.output = output
        self.exited: asyncio.Future[None] = loop.create_future()
        self.closed: asyncio.Future[None] = loop.create_future()

    def pipe_data_received(self, fd: int, data: bytes) -> None:
        self.output.feed(data)

    def pipe_connection_lost(self, fd: int, exc: Exception | None) -> None:
        if fd == 1 and not self.closed.done():
            self.closed.set_result(None)

    def process_exited(self) -> None:
        if not self.exited.done():
            self.exited.set_result(None)


def _shell_path() -> str:
    if os.path.exists("/bin/bash"):
        return "/bin/bash"
    return shutil.which("bash") or "/bin/sh"


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _kill_started(start: asyncio.Future[Any]) -> None:
    if not start.cancelled() and start.exception() is None:
        transport, _ = start.result()
        _kill_group(transport.get_pid())
        transport.close()


async def _wait(future: asyncio.Future[None], seconds: float) -> bool:
    try:
        async with asyncio.timeout(seconds):  # (not wait_for: on 3.11 it can swallow a /stop's cancel)
            await asyncio.shield(future)
        return True
    except TimeoutError:
        return False


@dataclass(frozen=True, slots=True)
class Shell:
    """Where and how commands run; `timeout` is the default a call may override."""

    workspace: Path
    redact: Redactor
    secrets: tuple[str, ...]
    timeout: float
    output_limit: int
    sandbox: Sandbox

    async def run(self, command: str, timeout: float, *, confined: bool = True) -> str:
        """Run `command` in its own session; whatever is left of it when it ends or times out is killed.

        The pipe is read until the process group is gone (background children hold it open), so
        once the shell exits its whole group is killed: nothing a command starts outlives it.
        """
        self.workspace.mkdir(parents=True, exist_ok=True)
        argv = [_shell_path(), "-c", command]
        if confined and await self.sandbox.ready():
            argv = self.sandbox.wrap(argv, self.workspace)
        output = _Output(self.output_limit)
        loop = asyncio.get_running_loop()
        start = asyncio.ensure_future(loop.subprocess_exec(
            lambda: _Run(output), *argv,
            stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
            cwd=self.workspace, env=command_env(self.secrets), start_new_session=True))
        try:
            transport, proto = await asyncio.shield(start)
        except BaseException:
            # cancelled while starting: the shell may already run (asyncio itself would kill only the
            # shell, not what it started), so let the start finish and then kill the whole group
            start.add_done_callback(_kill_started)
            raise
        pgid = transport.get_pid()  # a new session: the shell leads its own process group
        try:
            timed_out = not await _wait(proto.exited, timeout)
            _kill_group(pgid)
            await _wait(proto.closed, KILL_GRACE)  # False only if something escaped with setsid
            await _wait(proto.exited, KILL_GRACE)
            code = transport.get_returncode()
        except BaseException:  # cancelled (the turn was stopped): nothing may keep running
            _kill_group(pgid)
            try:  # reap it while the loop still runs, briefly
                await _wait(proto.exited, KILL_GRACE)
            except BaseException:
                pass
            raise
        finally:
            transport.close()
        text = output.render(self.redact) or "(no output)"
        if timed_out:
            return f"timed out after {timeout:g} s; the process was killed\n{text}"
        return f"exit code {code}\n{text}"
