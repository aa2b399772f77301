"""What every fake platform has in common: a loopback server's lifecycle and address, the calls
it recorded, and waiting on them (a condition notified on every call, never a sleep)."""

from __future__ import annotations

import asyncio
import socket
from typing import Any, Callable, Self

from aiohttp import web


class RecordingFake:
    """Base of the fakes. Subclasses set `calls` (objects with `status` and the attribute named by
    `key`), `_cond` and `_url`, and implement `start()` / `stop()`."""

    key = "method"  # the attribute of a call that `calls_to` and `wait_for` match
    calls: list[Any]
    _cond: asyncio.Condition
    _url: str | None
    _port: int
    _runner: web.AppRunner | None
    _closing: bool

    async def _listen(self, app: web.Application) -> None:
        """Serve `app` on 127.0.0.1 (`_port`, or a free port) and set `url`."""
        self._runner = web.AppRunner(app, shutdown_timeout=1.0, access_log=None)
        await self._runner.setup()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", self._port))
        self._url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        self._closing = False
        await web.SockSite(self._runner, sock).start()

    async def _drop(self, call: Any, request: web.Request) -> None:
        """Close the connection of a call without an answer (status -1)."""
        call.status = -1
        await self._notify()
        assert request.transport is not None
        request.transport.abort()
        raise web.HTTPInternalServerError()  # never reaches the client

    async def _hold_answer(self, call: Any, request: web.Request, release: Any) -> None:
        """The call took effect; keep its answer (status -3) until `release` is set. A client that goes
        away meanwhile never learns what the call made (status 499; the effect stays), as when a process
        is killed between the platform's answer and reading it."""
        call.status = -3
        await self._notify()
        while not release.is_set():
            if self._closing or request.transport is None or request.transport.is_closing():
                call.status = 499
                await self._notify()
                raise web.HTTPInternalServerError()  # never reaches the client
            try:
                await asyncio.wait_for(release.wait(), 0.05)
            except TimeoutError:
                pass

    _faults: list[Any]

    def _take_fault(self, call: Any) -> Any | None:
        """The first injected fault that applies to `call` (its `applies`), one of its count used."""
        for fault in self._faults:
            if fault.applies(call):
                fault.count -= 1
                if fault.count <= 0:
                    self._faults.remove(fault)
                return fault
        return None

    async def start(self) -> None:
        raise NotImplementedError

    async def stop(self) -> None:
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT``."""
        if self._url is None:
            raise RuntimeError(f"{type(self).__name__} is not started")
        return self._url

    def calls_to(self, name: str) -> list[Any]:
        """Every recorded call of ``name``, in order."""
        return [c for c in self.calls if getattr(c, self.key) == name]

    async def wait_until(self, condition: Callable[[], bool], timeout: float = 5.0,
                         what: Callable[[], str] | None = None) -> None:
        """Wait until ``condition()`` holds; it is checked again whenever the fake notifies."""
        async with self._cond:
            try:
                await asyncio.wait_for(self._cond.wait_for(condition), timeout)
            except TimeoutError:
                if what is None:
                    raise
                seen = "\n  ".join(repr(c) for c in self.calls[-30:]) or "(none)"
                raise TimeoutError(f"waited {timeout}s for {what()}; last calls seen:\n  {seen}") from None

    async def wait_for(self, name: str, predicate: Callable[[Any], bool] | None = None,
                       count: int = 1, timeout: float = 5.0, since: int = 0) -> list[Any]:
        """Wait until ``count`` answered calls of ``name`` (from ``calls[since:]``) match
        ``predicate``; return all that match. A held call is visible with status -2, one that took
        effect and whose answer is held with -3."""
        def matching() -> list[Any]:
            return [c for c in self.calls[since:] if getattr(c, self.key) == name and self._answered(c)
                    and (predicate is None or predicate(c))]

        await self.wait_until(lambda: len(matching()) >= count, timeout,
                              lambda: f"{count} {name} call(s){' matching the predicate' if predicate else ''}, "
                                      f"got {len(matching())}")
        return matching()

    @staticmethod
    def _answered(call: Any) -> bool:
        """A call counts once answered (status 0 means still open)."""
        return bool(call.status)

    async def _notify(self) -> None:
        async with self._cond:
            self._cond.notify_all()
