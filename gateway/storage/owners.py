"""Conversation owners (`conversation_owners`) and instances' life leases (`instance_leases`): which instance
runs each conversation while several instances share one database (how they are used: gateway.chat.owners).

An instance's life lease ends `seconds` after its last renewal, by the database's clock (`NOW_SECONDS`), so
that instances whose machines' clocks differ agree on it. A conversation is owned by one instance at a time:
claiming is one upsert that changes the row only when it is free, already the claimer's, or its owner's life
lease has ended (or was never taken); two instances claiming at once meet on the primary key and exactly one
wins. An owner gives a conversation up only when none of its messages is left unfinished (nor a reply of it
waits to be sent), in one statement: a message stored on another instance meanwhile either keeps it the
owner's (it sees the message and runs it), or finds the conversation free (and claims it).
"""

from __future__ import annotations

from typing import Sequence

from gateway.storage.connection import Connection, Work
from gateway.storage.inbox import UNFINISHED, UNFINISHED_COLUMNS, Unfinished, unfinished
from gateway.storage.tables import Tables, live_instance

NO_REPLY_WAITING = ("NOT EXISTS (SELECT 1 FROM outbox o JOIN inbox r ON r.id = o.inbox_id WHERE o.state = 'pending'"
                    " AND r.session_key = conversation_owners.session_key)")  # (of `conversation_owners`' row)


class NotOwner(RuntimeError):
    """The conversation is no longer this instance's (its life lease ended and another took it over): what its
    turn would have committed is not."""


def still_owned(key: str, holder: str) -> Work:
    """A statement for a turn's commit: the conversation `key` is still `holder`'s, and stays so until the commit
    ends (its row is locked: another instance's claim waits for it); `NotOwner` (the commit rolls back) if not."""
    async def check(db: Connection) -> None:
        if await db.execute("UPDATE conversation_owners SET since = since WHERE session_key = ? AND holder = ?",
                            key, holder) != 1:
            raise NotOwner(f"the conversation {key} is no longer this instance's")
    return check


def claiming(key: str, holder: str) -> Work:
    """The claim of `OwnerStore.claim` as a statement of a unit of work (the storing of a message)."""
    async def claim(db: Connection) -> bool:
        now = db.dialect.NOW_SECONDS
        return await db.fetchval(
            f"INSERT INTO conversation_owners (session_key, holder, since) SELECT ?1, ?2, {now}"
            f" WHERE {live_instance('?2', now)}"
            " ON CONFLICT (session_key) DO UPDATE SET holder = excluded.holder, since = excluded.since"
            " WHERE conversation_owners.holder = excluded.holder"
            f" OR NOT {live_instance('conversation_owners.holder', now)} RETURNING holder",
            key, holder) is not None
    return claim


class OwnerStore(Tables):
    async def live(self, holder: str, seconds: float) -> None:
        """Take or renew `holder`'s life lease, to end `seconds` from now."""
        await self.execute(f"INSERT INTO instance_leases (holder, until) VALUES (?, {self.db.dialect.NOW_SECONDS} + ?)"
                           " ON CONFLICT (holder) DO UPDATE SET until = excluded.until", holder, float(seconds))

    async def end(self, holder: str) -> None:
        """`holder` stops: its life lease and its conversations end now (another instance takes up what it left)."""
        async def end(db: Connection) -> None:
            await db.execute("DELETE FROM conversation_owners WHERE holder = ?", holder)
            await db.execute("DELETE FROM instance_leases WHERE holder = ?", holder)
        await self.db.write(end)

    async def lives(self) -> list[str]:
        """The instances whose life lease has not ended."""
        rows = await self.fetch(f"SELECT holder FROM instance_leases WHERE until >= {self.db.dialect.NOW_SECONDS}")
        return [r["holder"] for r in rows]

    async def drop(self, holder: str) -> None:
        """End the life lease of an instance known to be gone (its process exited): its conversations are free."""
        await self.execute("DELETE FROM instance_leases WHERE holder = ?", holder)

    async def claim(self, key: str, holder: str) -> bool:
        """Own the conversation `key` (or go on owning it); whether `holder` owns it now. Only while its own
        life lease lasts."""
        return await self.db.write(claiming(key, holder), single=True)

    async def release(self, keys: Sequence[str], holder: str) -> int:
        """Give up those of the conversations `keys` that `holder` owns and that have nothing unfinished and
        no reply waiting to be sent (the next answer, run on another instance, would go out before it); how
        many it gave up."""
        d = self.db.dialect
        return await self.execute(
            f"DELETE FROM conversation_owners WHERE holder = ? AND session_key {d.IN_LIST} AND NOT EXISTS"
            f" (SELECT 1 FROM inbox i WHERE i.session_key = conversation_owners.session_key AND {UNFINISHED})"
            f" AND {NO_REPLY_WAITING}", holder, d.listed(keys))

    async def give_up(self, holder: str) -> int:
        """`holder` stops: give up its conversations, unfinished ones too (another instance takes them up at
        once), but not one with a reply waiting: that one is `holder`'s until its life lease ends (`end`),
        after its last flush. How many it gave up."""
        return await self.execute(f"DELETE FROM conversation_owners WHERE holder = ? AND {NO_REPLY_WAITING}", holder)

    async def counts(self) -> dict[str, int]:
        """How many conversations each instance owns now (`chatgate status`)."""
        rows = await self.fetch("SELECT holder, count(*) AS n FROM conversation_owners GROUP BY holder")
        return {r["holder"]: int(r["n"]) for r in rows}

    async def owned(self, holder: str) -> tuple[list[str], list[Unfinished]]:
        """The conversations `holder` owns, and their unfinished messages, oldest first."""
        keys = [r["session_key"] for r in await self.fetch(
            "SELECT session_key FROM conversation_owners WHERE holder = ?", holder)]
        if not keys:
            return [], []
        rows = await self.fetch(f"SELECT {UNFINISHED_COLUMNS} FROM inbox i JOIN conversation_owners o"
                                f" ON o.session_key = i.session_key WHERE o.holder = ? AND {UNFINISHED} ORDER BY i.id",
                                holder)
        return keys, [unfinished(r) for r in rows]

    async def orphaned(self) -> list[tuple[str, str]]:
        """(conversation, platform) of the conversations with unfinished messages and no live owner (never
        claimed, or its owner's life ended)."""
        now = self.db.dialect.NOW_SECONDS
        rows = await self.fetch(
            f"SELECT DISTINCT i.session_key, i.platform FROM inbox i WHERE {UNFINISHED} AND NOT EXISTS (SELECT 1 FROM"
            " conversation_owners o WHERE o.session_key = i.session_key"
            f" AND {live_instance('o.holder', now)})")
        return [(r["session_key"], r["platform"]) for r in rows]
