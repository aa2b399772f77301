"""How far a person is trusted, and whom a run acts for when several people's words drive it.

Trust, from most to least: an admin (`access.admins`; everyone on the local web chat), an allowed
user (`access.allowed_users`), a person admitted by pairing, anyone else.

Every run — a person's turn, a goal's, a scheduled job's, a background review — acts for the people
whose words its context holds (`Trust.settle`, the one place that decides it): everyone with a message
in the session's transcript, and who it is run for now (the person asking; a goal's creator and whoever
added criteria; a job's owner). When they are one person, it acts as that person. When they are several
(a shared group session, a topic, a thread), it acts as the **least trusted** of them (of equals, the
one run for now, else the one who spoke last), so that everything decided by who the person is —
whether shared notes and skills wait for an admin, a scheduled job's owner and rights, who may answer
its approvals and which grants cover them — is decided for that person (an approval prompt then says
on whose behalf it asks); and as **nobody in particular**: it keeps no notes about one person
(`ToolContext.several_people`). So does a person's turn from the moment another person's message is
folded into it (busy policy `steer`): it then acts on both people's words.

What a run's `session_search` may read depends on who reads its answer, not only on whom it acts for:
a run whose answer goes to a group, a channel or a thread searches only its own conversation
(`ConversationSearch`) — its readers are whoever is in that chat, whom nobody can list, so another
conversation's words (an admin's direct chat) could reach people who may not read them. Only a run
whose answer one person alone reads (a direct chat; a scheduled job that delivers to the direct chat
it was made in, or nowhere) searches that person's conversations.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Iterable

from agent.tools import ApprovalPort, AskingFor, Rank, ToolContext
from gateway.access.pairing import Pairing
from gateway.access.policy import check_access, is_admin
from gateway.config import AccessConfig

from gateway.storage.sessions import SearchHit, SessionStore
from platforms.base import InboundMessage

ANYONE, PAIRED, ALLOWED, ADMIN = Rank
Person = tuple[str, str]  # (platform, user id)


@dataclass(frozen=True, slots=True)
class Acting:
    """Whom a run acts for: `user_id` on `platform`, of trust `rank` (one person alone: by the configuration,
    pairing unread); `several`: on several people's words."""

    platform: str
    user_id: str
    rank: Rank
    several: bool


class Trust:
    def __init__(self, access: AccessConfig, pairing: Pairing, local: frozenset[str]) -> None:
        self.access = access
        self.pairing = pairing
        self.local = local  # platforms on a local, already-authenticated surface (see check_access)

    def known_rank(self, platform: str, user_id: str) -> Rank:
        """The rank the configuration gives (a paired person counts as anyone here)."""
        if platform in self.local or is_admin(self.access, platform, user_id):
            return ADMIN
        return ALLOWED if user_id in self.access.allowed_users.get(platform, ()) else ANYONE

    async def rank(self, platform: str, user_id: str) -> Rank:
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
        """Whom a run on these people's words acts for (`people` in the order they spoke, who the run is for
        now last: of equals, the latest of them); None: nobody spoke."""
        distinct = list(dict.fromkeys(reversed(list(people))))[::-1]  # each where they last appear
        if len(distinct) <= 1:  # nobody to choose among: no read (`joined` reads their rank by the configuration)
            return Acting(*distinct[0], self.known_rank(*distinct[0]), False) if distinct else None
        ranked = [(await self.rank(*p), n, p) for n, p in enumerate(distinct)]
        rank, _, (platform, user_id) = min(ranked, key=lambda r: (r[0], -r[1]))  # of equals, the latest
        return Acting(platform, user_id, rank, len(distinct) > 1)

    async def settle(self, ctx: ToolContext, transcripts: SessionStore, run_for: Iterable[Person], *,
                     private: bool) -> tuple[ToolContext, Acting | None]:
        """The rule of every run (see the module doc): the context `ctx` becomes, acting for the least
        trusted of the session's speakers and `run_for` (who the run is for now), its search seeing only its
        own conversation unless `private` (one person alone reads its answer); and whom it acts for. One
        read besides the ranks: the speakers."""
        heard = await transcripts.speakers(ctx.session_id) if ctx.session_id is not None else []
        acting = await self.acting_for([*heard, *run_for])
        if acting is not None:
            ctx = self.apply(ctx, acting, transcripts)
        return (ctx if private else confine(ctx, transcripts)), acting

    def apply(self, ctx: ToolContext, acting: Acting, transcripts: SessionStore) -> ToolContext:
        """`ctx` made to act for `acting` (see the module doc)."""
        approvals = ctx.approvals
        if acting.user_id != ctx.user_id and approvals is not None:  # the prompt says for whom it asks
            approvals = OnBehalf(approvals, acting)
        ctx = replace(ctx, user_id=acting.user_id, rank=acting.rank, approvals=approvals)
        return confine(replace(ctx, several_people=True), transcripts) if acting.several else ctx

    def joined(self, ctx: ToolContext, person: Person, transcripts: SessionStore) -> ToolContext:
        """The context of a running turn (busy policy `steer`), a goal's or a person's own, once `person`'s
        message joins it: from then on it acts for the least trusted of them all (by the configuration: a
        paired person counts as anyone), as a run on several people's words."""
        if person == (ctx.platform, ctx.user_id):
            return ctx
        rank = self.known_rank(*person)
        current = ctx.rank  # (a person's own turn: their rank by the configuration)
        current = self.known_rank(ctx.platform, ctx.user_id) if current is None else current
        chosen = Acting(*person, rank, True) if rank <= current else Acting(ctx.platform, ctx.user_id, current, True)
        return self.apply(ctx, chosen, transcripts)


class OnBehalf(AskingFor):
    """The approvals of a run that acts for someone other than the person it was started for: each prompt
    says for whom it asks (the grants and rules that cover it, and who may answer, are that person's)."""

    def __init__(self, port: ApprovalPort, acting: Acting) -> None:
        while isinstance(port, OnBehalf):  # (a later joiner replaces the note; it does not add one)
            port = port.port
        super().__init__(port, f"on behalf of {acting.platform}:{acting.user_id}, the least trusted person whose "
                               "words this turn reads")


def confine(ctx: ToolContext, transcripts: SessionStore) -> ToolContext:
    """`ctx` with its `session_search` seeing only its own conversation (no session: nothing)."""
    search = ctx.transcripts
    if search is not None and not isinstance(search, ConversationSearch):
        search = ConversationSearch(transcripts, ctx.session_id) if ctx.session_id is not None else None
    return replace(ctx, conversation_only=True, transcripts=search)


class ConversationSearch:
    """`session_search` for a run whose answer others read: only its own conversation."""

    def __init__(self, transcripts: SessionStore, session_id: int) -> None:
        self.transcripts = transcripts
        self.session_id = session_id

    async def search(self, query: str, *, platform: str, user_id: str, limit: int = 10) -> list[SearchHit]:
        return await self.transcripts.search(query, platform=platform, user_id=user_id, limit=limit,
                                                session_id=self.session_id)
