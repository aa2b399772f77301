"""How far a person is trusted, and whom a run acts for when several people's words drive it.

Trust, from most to least: an admin (`access.admins`; everyone on the local web chat), an allowed
user (`access.allowed_users`), a person admitted by pairing, anyone else.

A run nobody is asking for right now — a goal's turn, a background review — acts on the words in
the conversation it reads. When they are one person's, it acts as that person. When they are
several people's (a shared group session, a topic, a thread), it acts as the **least trusted** of
them (of equals, the one who spoke last), so that everything decided by who the person is — whether
shared notes and skills wait for an admin, a scheduled job's owner and rights, who may answer its
approvals — is decided for that person; and as **nobody in particular**: its conversation search
sees only that conversation (`ConversationSearch`) and it keeps no notes about one person
(`agent.tools.SEVERAL_PEOPLE`). So does a person's turn from the moment another person's
message is folded into it (busy policy `steer`): it then acts on both people's words.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from agent.tools import SEVERAL_PEOPLE, ToolContext
from gateway.access.pairing import Pairing
from gateway.access.policy import check_access, is_admin
from gateway.config import AccessConfig
from gateway.storage import Store
from gateway.storage.sessions import SearchHit
from platforms.base import InboundMessage

ANYONE, PAIRED, ALLOWED, ADMIN = range(4)
RANK = "trust_rank"  # ToolContext.extras: the rank of the person a run acts as
Person = tuple[str, str]  # (platform, user id)


@dataclass(frozen=True, slots=True)
class Acting:
    """Whom a run acts for: `user_id` on `platform`, of trust `rank`; `several`: on several people's words."""

    platform: str
    user_id: str
    rank: int
    several: bool


class Trust:
    def __init__(self, access: AccessConfig, pairing: Pairing, local: frozenset[str]) -> None:
        self.access = access
        self.pairing = pairing
        self.local = local  # platforms on a local, already-authenticated surface (see check_access)

    def known_rank(self, platform: str, user_id: str) -> int:
        """The rank the configuration gives (a paired person counts as anyone here)."""
        if platform in self.local or is_admin(self.access, platform, user_id):
            return ADMIN
        return ALLOWED if user_id in self.access.allowed_users.get(platform, ()) else ANYONE

    async def rank(self, platform: str, user_id: str) -> int:
        known = self.known_rank(platform, user_id)
        if known == ANYONE and await self.pairing.is_paired(platform, user_id):
            return PAIRED
        return known

    async def admitted(self, msg: InboundMessage) -> bool:
        """Whether the author of `msg` may still talk to the agent where they wrote it (the access rules
        of `gateway.access.policy`, today's configuration and pairings; no mention needed)."""
        decision = check_access(msg, self.access, local=self.local, require_mention=False)
        if decision != "allow" and await self.pairing.is_paired(msg.platform, msg.user_id):
            decision = check_access(msg, self.access, local=self.local, paired=True, require_mention=False)
        return decision == "allow"

    async def may_still_talk(self, platform: str, user_id: str, chat_id: str) -> bool:
        """Whether this person may still talk to the agent in that chat (a scheduled job's owner: a
        revoked person's jobs do not go on running in their name)."""
        return await self.admitted(InboundMessage(platform, chat_id, "dm", user_id, "", ""))

    async def acting_for(self, people: Iterable[Person]) -> Acting | None:
        """Whom a run on these people's words (in the order they spoke) acts for; None: nobody spoke."""
        distinct = list(dict.fromkeys(people))
        if not distinct:
            return None
        ranked = [(await self.rank(*p), n, p) for n, p in enumerate(distinct)]
        rank, _, (platform, user_id) = min(ranked, key=lambda r: (r[0], -r[1]))  # of equals, the latest
        return Acting(platform, user_id, rank, len(distinct) > 1)

    def apply(self, ctx: ToolContext, acting: Acting, store: Store) -> None:
        """Make a run's tool context act for `acting` (see the module doc)."""
        ctx.user_id = acting.user_id
        ctx.extras[RANK] = acting.rank
        if acting.several:
            ctx.extras[SEVERAL_PEOPLE] = True
            if ctx.transcripts is not None and ctx.session_id is not None:
                ctx.transcripts = ConversationSearch(store, ctx.session_id)

    def joined(self, ctx: ToolContext, person: Person, store: Store) -> None:
        """`person`'s message joins a running turn (busy policy `steer`), a goal's or a person's own: from
        now on it acts for the least trusted of them all (by the configuration: a paired person counts as
        anyone), as a run on several people's words."""
        if person == (ctx.platform, ctx.user_id):
            return
        rank = self.known_rank(*person)
        current = ctx.extras.get(RANK)  # (a person's own turn: their rank by the configuration)
        current = self.known_rank(ctx.platform, ctx.user_id) if current is None else int(current)
        chosen = Acting(*person, rank, True) if rank <= current else Acting(ctx.platform, ctx.user_id, current, True)
        self.apply(ctx, chosen, store)


async def speakers(store: Store, session_id: int) -> list[Person]:
    """Everyone whose messages the session's transcript holds (what its turns and reviews read), in
    the order of their first message."""
    return await store.sessions.speakers(session_id)


class ConversationSearch:
    """`session_search` for a run that acts for several people: only the conversation they share."""

    def __init__(self, store: Store, session_id: int) -> None:
        self.store = store
        self.session_id = session_id

    async def search(self, query: str, *, platform: str, user_id: str, limit: int = 10) -> list[SearchHit]:
        return await self.store.sessions.search(query, platform=platform, user_id=user_id, limit=limit,
                                       session_id=self.session_id)

