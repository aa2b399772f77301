"""Who may change the workspace while a command runs with chatgate's own rights.

Tool calls of one step run together, and every chat's turn works in the same workspace: a
sandboxed command or a `write_file` could otherwise change a script between the moment a person
is shown it and the moment it runs unconfined (or swap a link between the read-only check and the
run). So the sandboxed commands and the file tools' writes hold the gate *shared*, and a command
that runs unconfined holds it *exclusive* — while it is checked and shown, and again, after the
person's yes, while it is checked once more and runs (one let through unasked holds it from its check
to its end: given up in between, a command queued meanwhile would be checked and run first). Nobody waits for a person while holding it.
A waiting exclusive holder goes first: new shared holders wait behind it.
"""

from __future__ import annotations

import asyncio
import os
import weakref
from contextlib import asynccontextmanager
from pathlib import Path
from typing import AsyncIterator, Callable

_GATES: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, WorkspaceGate]]" = \
    weakref.WeakKeyDictionary()


class WorkspaceGate:
    """A readers-writer lock for one event loop (its waits are cancellable; nothing leaks on cancel)."""

    def __init__(self) -> None:
        self._shared = 0
        self._exclusive = False
        self._queued = 0  # exclusive holders waiting
        self._changed: asyncio.Event | None = None

    def _wake(self) -> None:
        if self._changed is not None:
            self._changed.set()
            self._changed = None

    async def _until(self, ready: Callable[[], bool]) -> None:
        while not ready():
            if self._changed is None:
                self._changed = asyncio.Event()
            await self._changed.wait()

    @asynccontextmanager
    async def shared(self) -> AsyncIterator[None]:
        await self._until(lambda: not self._exclusive and not self._queued)
        self._shared += 1
        try:
            yield
        finally:
            self._shared -= 1
            self._wake()

    @asynccontextmanager
    async def exclusive(self) -> AsyncIterator[None]:
        self._queued += 1
        try:
            await self._until(lambda: not self._exclusive and not self._shared)
        finally:
            self._queued -= 1
            self._wake()  # (cancelled while queued: the shared holders behind it may go on)
        self._exclusive = True
        try:
            yield
        finally:
            self._exclusive = False
            self._wake()


def gate_for(workspace: Path) -> WorkspaceGate:
    """The gate of `workspace` (by its real path) in the running event loop: one per gateway."""
    gates = _GATES.setdefault(asyncio.get_running_loop(), {})
    return gates.setdefault(os.path.realpath(workspace), WorkspaceGate())
