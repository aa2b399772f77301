"""The tool contract: a tool, what a call is lent (`ToolContext`, with the ports the gateway implements), the registry.

Every tool declares its JSON schema and toolset; runs can be limited. A `ToolScope` is the only way
a run sees tools. It offers the model the schemas of the tools it allows and refuses any other call,
so a limited run (a review, a cron job) is limited by code, not by asking the model nicely.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field, replace
from datetime import tzinfo
from enum import IntEnum
from typing import Any, Awaitable, Callable, Iterable, Protocol


log = logging.getLogger(__name__)


class TranscriptSearch(Protocol):
    """What `session_search` needs from the gateway's store."""

    async def search(self, query: str, *, platform: str, user_id: str, limit: int = 10) -> list[Any]: ...


@dataclass(frozen=True, slots=True)
class ApprovalRequest:
    """What a tool wants to do that needs a person's consent."""

    kind: str  # "command" | "file" | "job" (create or rewrite one) | "job_change" (pause, resume, remove, run)
    subject: str  # the command line, or the path
    reasons: tuple[str, ...]  # plain words; they may quote the model, so they are shown as quoted text
    confinement: str = ""  # a command's: "sandbox" (inside bubblewrap) or "unconfined" (chatgate's own rights);
    # part of what a person allows: a grant for one never covers a command that runs with more
    reach: str = ""  # an unconfined command's: a digest of where its words lead and of the code it runs
    # (`agent.safety.reach`); a grant made for it covers it only while that is the same
    each_time: bool = False  # a person must answer this very request: no grant or rule covers it, and the
    # prompt offers no lasting yes (an unconfined command that reaches chatgate's own state)


@dataclass(frozen=True, slots=True)
class ApprovalOutcome:
    approved: bool
    decision: str  # "once" | "session" | "always" | "auto" | "denied" | "expired" | "cancelled" | "refused"
    message: str  # the outcome in plain words, for the model


class ApprovalPort(Protocol):
    """How a tool asks the person it works for; the gateway decides how (buttons, rules, mode)."""

    async def request(self, ctx: ToolContext, request: ApprovalRequest) -> ApprovalOutcome: ...


class AskingFor:
    """An approval port that asks through another, saying first on whose behalf (a scheduled job,
    a subagent): the person deciding sees who wants it. The words may hold a model's text (a task,
    a job's name): they become one line, and the port shows every reason as quoted text."""

    def __init__(self, port: ApprovalPort, on_behalf_of: str) -> None:
        self.port = port
        self.on_behalf_of = " ".join(on_behalf_of.split())

    async def request(self, ctx: ToolContext, request: ApprovalRequest) -> ApprovalOutcome:
        return await self.port.request(ctx, replace(request, reasons=(self.on_behalf_of, *request.reasons)))


class NobodyToAsk:
    """An approval port for a run with nobody to ask (a scheduled job's, a task's without a chat): it refuses,
    saying what needed consent and then `instead` (why nobody can approve, and what to do rather)."""

    def __init__(self, instead: str) -> None:
        self.instead = instead

    async def request(self, ctx: ToolContext, request: ApprovalRequest) -> ApprovalOutcome:
        return ApprovalOutcome(False, "refused",
                               f"Refused: {'; '.join(request.reasons) or 'it needs consent'}. {self.instead}")


class ToolJournal(Protocol):
    """Where a turn notes, before it runs, each call of a tool with side effects, so that a turn
    cut off by a crash is not blindly run again (the gateway keeps it with the message)."""

    async def tool_started(self, name: str, arguments: str) -> None: ...


class FileSink(Protocol):
    """Files the agent hands to the person, sent after the turn's reply. The agent opens a file under
    its own rules and hands it over open; the sink keeps a private copy, and only that is sent."""

    async def keep(self, source: int, name: str, where: str, limit: int) -> None:
        """Copy the regular file open as `source` (at most `limit` bytes, else `agent.safety.beneath.TooLarge`)
        to go out as `name`; `where` says where it came from. Refuses with `agent.safety.beneath.Refused`."""
        ...


# -- what a call is lent ------------------------------------------------------------------------
# What a tool call is lent (`ToolContext`): whom it acts for and with what authority, where it
# stands, and the ports the gateway implements.
#
# A context is a frozen value. The gateway decides its authority (`gateway.access.trust`) by deriving
# a new context with `dataclasses.replace`, never by changing one a run already holds; the agent loop
# derives each step's context the same way. The one thing a turn's calls share by reference is its
# `TurnShare` (how many subagents it has started), kept through every derived context.


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
    person the turn acted for at its first delegation), how many subagents it has started, and whether a
    tool ended the turn (`agent.loop` then asks the model nothing more)."""

    person: tuple[str, str] | None = None
    subagents_started: int = 0
    ended: str | None = None  # a tool ended the turn (a task's question to a person): the turn's answer


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


ToolHandler = Callable[..., Awaitable[str]]


@dataclass(frozen=True, slots=True)
class Tool:
    name: str
    description: str
    parameters: dict[str, Any]
    handler: ToolHandler  # async def handler(ctx: ToolContext, **arguments) -> str
    toolset: str = "core"
    side_effects: bool = False  # changes something outside the conversation (files, processes, jobs)

    def schema(self) -> dict[str, Any]:
        return {"type": "function",
                "function": {"name": self.name, "description": self.description, "parameters": self.parameters}}


class ToolRegistry:
    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        self._schemas: dict[frozenset[str], list[dict[str, Any]]] = {}  # per allowed set: the same list each time
        for tool in tools:
            self.register(tool)

    def register(self, tool: Tool) -> None:
        if tool.name in self._tools:
            raise ValueError(f"tool {tool.name!r} is already registered")
        self._tools[tool.name] = tool
        self._schemas.clear()

    def names(self) -> list[str]:
        return list(self._tools)

    def scope(self, *, tools: Iterable[str] | None = None, toolsets: Iterable[str] | None = None) -> "ToolScope":
        """A view limited to the named tools and/or toolsets (no arguments: everything)."""
        if tools is None and toolsets is None:
            allowed = set(self._tools)
        else:
            wanted_sets = set(toolsets or ())
            allowed = set(tools or ()) | {t.name for t in self._tools.values() if t.toolset in wanted_sets}
        return ToolScope(self, frozenset(n for n in allowed if n in self._tools))

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def schemas(self, allowed: frozenset[str]) -> list[dict[str, Any]]:
        """The schemas of these tools, by name; one list per set, made once (do not change it)."""
        found = self._schemas.get(allowed)
        if found is None:
            found = self._schemas[allowed] = [self._tools[n].schema() for n in sorted(allowed)]
        return found


@dataclass(frozen=True, slots=True)
class ToolScope:
    registry: ToolRegistry
    allowed: frozenset[str]

    def schemas(self) -> list[dict[str, Any]]:
        return self.registry.schemas(self.allowed)

    async def call(self, name: str, raw_arguments: str, ctx: ToolContext) -> str:
        """Run one tool call and return its result text; errors come back as text for the model."""
        tool = self.registry.get(name)
        if tool is None or name not in self.allowed:
            log.warning("refused tool call %r outside the run's allowed tools", name)
            return f"error: tool {name!r} is not available in this conversation"
        try:
            args = json.loads(raw_arguments or "{}")
        except json.JSONDecodeError as exc:
            return f"error: the arguments for {name} are not valid JSON ({exc.msg}); send a JSON object"
        if not isinstance(args, dict):
            return f"error: the arguments for {name} must be a JSON object"
        missing = [k for k in tool.parameters.get("required", []) if k not in args]
        if missing:
            return f"error: {name} needs the argument(s): {', '.join(missing)}"
        unknown = set(args) - set(tool.parameters.get("properties", {}))
        if unknown:
            return f"error: {name} does not take the argument(s): {', '.join(sorted(unknown))}"
        if tool.side_effects and ctx.journal is not None:
            await ctx.journal.tool_started(name, raw_arguments)  # recorded before it can have any effect
        try:
            return await tool.handler(ctx, **args)
        except Exception as exc:  # a failing tool is reported to the model, not raised into the turn
            log.exception("tool %s failed", name)
            return f"error: {name} failed: {exc}"
