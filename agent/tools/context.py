"""What a tool call is lent (`ToolContext`): whom it acts for and with what authority, where it
stands, and the ports the gateway implements.

A context is a frozen value. The gateway decides its authority (`gateway.access.trust`) by deriving
a new context with `dataclasses.replace`, never by changing one a run already holds; the agent loop
derives each step's context the same way. The one thing a turn's calls share by reference is its
`TurnShare` (how many subagents it has started), kept through every derived context.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import tzinfo
from enum import IntEnum
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from agent.tools.contract import ApprovalPort, FileSink, ToolJournal, ToolScope, TranscriptSearch


class Rank(IntEnum):
    """How far a person is trusted, least to most (`gateway.access.trust` says who is which)."""

    ANYONE = 0
    PAIRED = 1
    ALLOWED = 2
    ADMIN = 3


@dataclass(frozen=True, slots=True)
class Place:
    """Where a run stands besides its chat: the chat's thread (topic), the session key its conversation
    is filed under, the inbox row of the message it answers (None: none of these)."""

    thread_id: str | None = None
    session_key: str | None = None
    inbox_id: int | None = None


class Seat(Protocol):
    """A subagent's place among its person's working subagents (`agent.delegation`)."""

    async def take(self) -> None: ...

    def give_back(self) -> None: ...


@dataclass(slots=True)
class TurnShare:
    """What the calls of one turn (and of its subagents) share: whose places their subagents use (the
    person the turn acted for at its first delegation) and how many subagents it has started."""

    person: tuple[str, str] | None = None
    subagents_started: int = 0


@dataclass(frozen=True, slots=True)
class ToolContext:
    """Who a tool call acts for, and the ports the gateway lends it. `platform` is "" where no person of
    any platform is behind the run (an operator's scheduled job)."""

    platform: str = ""
    chat_id: str = ""
    user_id: str = ""
    session_id: int | None = None
    place: Place = Place()
    timezone: str | tzinfo | None = None  # gateway.timezone (or a job's): a name, a tzinfo, or None
    provenance: str = "agent"  # who writes through the learning tools: "agent" in a conversation, "review"
    rank: Rank | None = None  # the rank the run acts under (None: `user_id`'s own, by the configuration)
    several_people: bool = False  # the run acts on the words of several people: no notes about one person
    conversation_only: bool = False  # others read its answer: `transcripts` search only this conversation
    transcripts: TranscriptSearch | None = None
    approvals: ApprovalPort | None = None  # None: nobody can consent, so anything needing consent is refused
    journal: ToolJournal | None = None
    files: FileSink | None = None  # None: this conversation cannot receive files
    tools: ToolScope | None = None  # the run's tools (set by the agent loop): a subagent's are no wider
    depth: int = 0  # how deep in delegation this run is (the main agent: 0)
    seat: Seat | None = None  # a subagent's place (None: the main agent's run)
    turn: TurnShare = field(default_factory=TurnShare)
