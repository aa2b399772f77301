"""Wake-ups between instances on one PostgreSQL database: LISTEN/NOTIFY.

An instance that leaves work to another (a message of a conversation another instance owns) sends a notice on a
channel (`notify`); every instance listening there is woken at once (`listen`), instead of at its next poll. The
polls stay: a notice is only a hint, lost when no one listens or the listening connection is down, and nothing
depends on it. The listener has a connection of its own (the group commit's is busy with transactions), opened
again after a pause when it is lost.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Callable

from gateway.storage.database import Database

log = logging.getLogger(__name__)

REOPEN_SECONDS = 5.0
LOOK = "chatgate_look"  # work left to another instance: a message of a conversation it owns, a reply it can send


async def notify(db: Database, channel: str) -> None:
    """Send a notice on `channel` (PostgreSQL; nothing on a database of one daemon's). A failure is logged: the
    others' polls find the work anyway."""
    if not db.engine.shared:
        return
    try:
        await db.read(lambda conn: conn.fetchval("SELECT pg_notify(?, '')", channel))
    except Exception as exc:
        log.debug("a notice on %s was not sent: %s", channel, exc)


async def listen(db: Database, channel: str, wake: Callable[[], None]) -> None:
    """Call `wake` on every notice on `channel`, until cancelled (PostgreSQL; on a database of one daemon's it
    returns at once)."""
    if not db.engine.shared:
        return
    engine = db.engine
    while True:
        try:
            conn = await engine.connect()  # type: ignore[attr-defined]
        except Exception as exc:
            log.warning("listening for other instances' notices: %s; trying again in %.0fs", exc, REOPEN_SECONDS)
            await asyncio.sleep(REOPEN_SECONDS)
            continue
        raw = conn.raw
        lost = asyncio.Event()
        raw.add_termination_listener(lambda _conn: lost.set())
        try:
            await raw.add_listener(channel, lambda *_notice: wake())
            await lost.wait()
            log.warning("the connection listening for other instances' notices was lost; opening another")
        except Exception as exc:
            log.warning("listening for other instances' notices failed: %s", exc)
        finally:
            await asyncio.shield(_close(raw))
        await asyncio.sleep(REOPEN_SECONDS)


async def _close(raw: object) -> None:
    try:
        await raw.close(timeout=2)  # type: ignore[attr-defined]
    except Exception:
        pass
