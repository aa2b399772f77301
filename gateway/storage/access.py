"""Pairing codes, the people admitted by pairing, and who spoke in a session (whom a run acts for).

A person has at most one row in `pairing_codes` per platform; handing out a code (forgetting expired
ones, sending the same code again or making room for a new one) is one transaction, as is admitting
a person: their code is deleted and they are added to `paired_users` together.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from gateway.storage.connection import Connection, Row
from gateway.storage.tables import Tables


@dataclass(frozen=True, slots=True)
class PendingCode:
    """A pairing code given to a person and not used yet."""

    code: str
    platform: str
    user_id: str
    user_name: str
    expires_at: float


def _pending(row: Row) -> PendingCode:
    return PendingCode(row["code"], row["platform"], row["user_id"], row["user_name"], row["expires_at"])


class AccessStore(Tables):
    async def is_paired(self, platform: str, user_id: str) -> bool:
        row = await self.fetchrow("SELECT 1 FROM paired_users WHERE platform = ? AND user_id = ?", platform, user_id)
        return row is not None

    async def code_to_send(self, platform: str, user_id: str, user_name: str, chat_id: str, *, new_code: str,
                           ttl: float, resend_after: float, max_pending: int) -> tuple[str | None, int]:
        """In one write, after forgetting expired codes: the person's code again when it was last sent
        `resend_after` seconds ago or more (None: sooner); without one, `new_code` for `ttl` seconds,
        after dropping the platform's oldest codes so that at most `max_pending` wait with it. Also how
        many codes were dropped."""
        now = time.time()

        async def code_to_send(db: Connection) -> tuple[str | None, int]:
            await db.execute("DELETE FROM pairing_codes WHERE expires_at <= ?", now)
            row = await db.fetchrow("SELECT code, last_sent_at FROM pairing_codes WHERE platform = ? AND user_id = ?",
                                    platform, user_id)
            if row is not None:
                if now - row["last_sent_at"] < resend_after:
                    return None, 0
                await db.execute("UPDATE pairing_codes SET last_sent_at = ? WHERE code = ?", now, row["code"])
                return str(row["code"]), 0
            dropped = await db.execute(  # (all but the newest `max_pending - 1`)
                "DELETE FROM pairing_codes WHERE platform = ? AND code NOT IN (SELECT code FROM pairing_codes"
                f" WHERE platform = ? ORDER BY created_at DESC, {db.dialect.INSERTION_ORDER} DESC LIMIT ?)",
                platform, platform, max(max_pending - 1, 0))
            await db.execute("INSERT INTO pairing_codes (code, platform, user_id, user_name, chat_id, created_at,"
                             " expires_at, last_sent_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                             new_code, platform, user_id, user_name, chat_id, now, now + ttl, now)
            return new_code, dropped

        return await self.db.write(code_to_send)

    async def admit(self, platform: str, code: str) -> PendingCode | None:
        """Use an unexpired code of the platform: its person is paired. None: no such code."""
        now = time.time()

        async def admit(db: Connection) -> Row | None:
            row = await db.fetchrow("DELETE FROM pairing_codes WHERE code = ? AND platform = ? AND expires_at > ?"
                                    " RETURNING *", code, platform, now)
            if row is not None:  # (paired again: the newer name and time, as a replace)
                await db.execute("INSERT INTO paired_users (platform, user_id, user_name, approved_at)"
                                 " VALUES (?, ?, ?, ?) ON CONFLICT (platform, user_id) DO UPDATE SET"
                                 " user_name = excluded.user_name, approved_at = excluded.approved_at",
                                 platform, row["user_id"], row["user_name"], now)
            return row

        row = await self.db.write(admit)
        return _pending(row) if row is not None else None

    async def unpair(self, platform: str, user_id: str) -> bool:
        """Remove a paired person; False when they were not paired."""
        return await self.execute(
            "DELETE FROM paired_users WHERE platform = ? AND user_id = ?", platform, user_id) > 0

    async def pending_codes(self) -> list[PendingCode]:
        """Unexpired codes, oldest first."""
        rows = await self.fetch(
            "SELECT * FROM pairing_codes WHERE expires_at > ? ORDER BY created_at", time.time())
        return [_pending(r) for r in rows]

    async def paired(self) -> list[tuple[str, str, str, float]]:
        """Paired people as (platform, user id, name, when), in the order they were admitted."""
        rows = await self.fetch("SELECT * FROM paired_users ORDER BY approved_at")
        return [(r["platform"], r["user_id"], r["user_name"], r["approved_at"]) for r in rows]

    async def expire_codes(self) -> int:
        """Forget expired codes; return how many."""
        return await self.execute("DELETE FROM pairing_codes WHERE expires_at <= ?", time.time())
