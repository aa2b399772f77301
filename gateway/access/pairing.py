"""Pairing: how an unknown person in a DM is admitted by the owner, with a short code.

A code is 8 characters from an alphabet without look-alikes and expires after an hour. A person
has one code at a time and gets it again at most every ten minutes, however often they write.
Strangers cannot block pairing by asking first: at most `MAX_PENDING` codes wait per platform,
and when that many do, the oldest is dropped to make room — so whoever writes now always gets
a code, and the table (and `chatgate pair list`) stays bounded. A dropped person gets a fresh
code when they write again. Approved people are kept in the database beside
`access.allowed_users`.
"""

from __future__ import annotations

import logging
import secrets
import sqlite3
import time
from dataclasses import dataclass

import aiosqlite

from gateway.storage import Store
from gateway.storage.database import first_row

log = logging.getLogger(__name__)
ALPHABET = "ABCDEFGHJKMNPQRSTUVWXYZ23456789"  # no 0/O, 1/I/L
CODE_LENGTH = 8
CODE_TTL = 3600.0
MAX_PENDING = 50  # per platform; when full, the oldest code makes room for the newest
RESEND_AFTER = 600.0


@dataclass(frozen=True, slots=True)
class PendingCode:
    code: str
    platform: str
    user_id: str
    user_name: str
    expires_at: float


def new_code() -> str:
    return "".join(secrets.choice(ALPHABET) for _ in range(CODE_LENGTH))


class Pairing:
    def __init__(self, store: Store) -> None:
        self.store = store

    async def is_paired(self, platform: str, user_id: str) -> bool:
        row = await self.store.fetch_one("SELECT 1 FROM paired_users WHERE platform = ? AND user_id = ?",
                                         (platform, user_id))
        return row is not None

    async def request(self, platform: str, user_id: str, user_name: str, chat_id: str) -> str | None:
        """The code to send this person now, or None when nothing should be sent."""
        now = time.time()

        async def request(db: aiosqlite.Connection) -> tuple[str | None, int]:
            await db.execute("DELETE FROM pairing_codes WHERE expires_at <= ?", (now,))
            row = await first_row(db, "SELECT code, last_sent_at FROM pairing_codes WHERE platform = ? AND user_id = ?",
                                  (platform, user_id))
            if row is not None:
                if now - row["last_sent_at"] < RESEND_AFTER:
                    return None, 0
                await db.execute("UPDATE pairing_codes SET last_sent_at = ? WHERE code = ?", (now, row["code"]))
                return str(row["code"]), 0
            dropped = (await db.execute(
                "DELETE FROM pairing_codes WHERE code IN (SELECT code FROM pairing_codes WHERE platform = ?"
                " ORDER BY created_at DESC, rowid DESC LIMIT -1 OFFSET ?)", (platform, MAX_PENDING - 1))).rowcount
            code = new_code()
            await db.execute("INSERT INTO pairing_codes VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                       (code, platform, user_id, user_name, chat_id, now, now + CODE_TTL, now))
            return code, dropped

        code, dropped = await self.store.write(request)
        if dropped:
            log.warning("%s pairing codes pending on %s: dropped the oldest to make room (many strangers are "
                        "asking for access)", MAX_PENDING, platform)
        return code

    async def approve(self, platform: str, code: str) -> PendingCode | None:
        """Admit the person who was given `code`; None when it is unknown or expired."""
        now = time.time()
        code = code.strip().upper()

        async def approve(db: aiosqlite.Connection) -> sqlite3.Row | None:
            row = await first_row(db, "DELETE FROM pairing_codes WHERE code = ? AND platform = ? AND expires_at > ?"
                                      " RETURNING *", (code, platform, now))
            if row is not None:
                await db.execute("INSERT OR REPLACE INTO paired_users VALUES (?, ?, ?, ?)",
                                 (platform, row["user_id"], row["user_name"], now))
            return row

        row = await self.store.write(approve)
        if row is None:
            return None
        return PendingCode(code, platform, row["user_id"], row["user_name"], row["expires_at"])

    async def revoke(self, platform: str, user_id: str) -> bool:
        return await self.store.execute("DELETE FROM paired_users WHERE platform = ? AND user_id = ?",
                                        (platform, user_id)) > 0

    async def pending(self) -> list[PendingCode]:
        rows = await self.store.fetch_all("SELECT * FROM pairing_codes WHERE expires_at > ? ORDER BY created_at",
                                          (time.time(),))
        return [PendingCode(r["code"], r["platform"], r["user_id"], r["user_name"], r["expires_at"]) for r in rows]

    async def approved(self) -> list[tuple[str, str, str, float]]:
        rows = await self.store.fetch_all("SELECT * FROM paired_users ORDER BY approved_at")
        return [(r["platform"], r["user_id"], r["user_name"], r["approved_at"]) for r in rows]

    async def expire(self) -> int:
        return await self.store.execute("DELETE FROM pairing_codes WHERE expires_at <= ?", (time.time(),))
