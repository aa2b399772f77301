"""Ending background tasks at shutdown."""

from __future__ import annotations

import asyncio
from typing import Iterable


async def finish_or_cancel(tasks: Iterable[asyncio.Task[None]], timeout: float) -> None:
    """Let `tasks` finish for up to `timeout` seconds, cancel what is left, wait for all to end."""
    running = [t for t in tasks if not t.done()]
    if not running:
        return
    _, pending = await asyncio.wait(running, timeout=timeout)
    for task in pending:
        task.cancel()
    await asyncio.gather(*running, return_exceptions=True)
