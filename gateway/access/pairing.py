"""Pairing: how an unknown person in a DM is admitted by the owner, with a short code.

A code is 8 characters from an alphabet without look-alikes and expires after an hour. A person
has one code at a time and gets it again at most every ten minutes, however often they write.
Strangers cannot block pairing by asking first: at most `MAX_PENDING` codes wait per platform,
and when that many do, the oldest is dropped to make room — so whoever writes now always gets
a code, and the table (and `chatgate pair list`) stays bounded. A dropped person gets a fresh
code when they write again. Approved people are kept in the database beside
`access.allowed_users` (`gateway.storage.access`: listing, revoking and expiring are its own).
"""

from __future__ import annotations

import logging
import secrets

from gateway.storage.access import AccessStore, PendingCode

log = logging.getLogger(__name__)
ALPHABET = "ABCDEFGHJKMNPQRSTUVWXYZ23456789"  # no 0/O, 1/I/L
CODE_LENGTH = 8
CODE_TTL = 3600.0
MAX_PENDING = 50  # per platform; when full, the oldest code makes room for the newest
RESEND_AFTER = 600.0


def new_code() -> str:
    return "".join(secrets.choice(ALPHABET) for _ in range(CODE_LENGTH))


class Pairing:
    """The codes' rules over the pairing tables."""

    def __init__(self, access: AccessStore) -> None:
        self.access = access

    async def is_paired(self, platform: str, user_id: str) -> bool:
        """(Asked by `Trust` and `Inbound`, which hold the pairing.)"""
        return await self.access.is_paired(platform, user_id)

    async def request(self, platform: str, user_id: str, user_name: str, chat_id: str) -> str | None:
        """The code to send this person now, or None when nothing should be sent."""
        code, dropped = await self.access.code_to_send(
            platform, user_id, user_name, chat_id, new_code=new_code(), ttl=CODE_TTL, resend_after=RESEND_AFTER,
            max_pending=MAX_PENDING)
        if dropped:
            log.warning("%s pairing codes pending on %s: dropped the oldest to make room (many strangers are "
                        "asking for access)", MAX_PENDING, platform)
        return code

    async def approve(self, platform: str, code: str) -> PendingCode | None:
        """Admit the person who was given `code`; None when it is unknown or expired."""
        return await self.access.admit(platform, code.strip().upper())
