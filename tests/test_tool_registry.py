"""Unit tests for agent/tools.py (registry, scopes, argument checks) and agent/builtin_tools.py."""

from __future__ import annotations

import asyncio
import json
import re
from datetime import datetime, timedelta, timezone
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from agent.tools import Tool, ToolContext, ToolRegistry
from agent.tools.builtin import BUILTIN_TOOLS, current_time, session_search
from gateway.storage.sessions import SearchHit


class Recorder:
    """A tool handler that records its calls."""

    def __init__(self, result: str = "ok") -> None:
        self.calls: list[tuple[ToolContext, dict[str, Any]]] = []
        self.result = result

    async def __call__(self, ctx: ToolContext, **kwargs: Any) -> str:
        self.calls.append((ctx, kwargs))
        return f"{self.result}:{json.dumps(kwargs, sort_keys=True)}"


def make_tool(name: str, toolset: str = "core", handler: Any = None, required: tuple[str, ...] = (),
              properties: dict[str, Any] | None = None) -> Tool:
    params: dict[str, Any] = {"type": "object", "properties": properties or {"x": {"type": "string"}}}
    if required:
        params["required"] = list(required)
    return Tool(name, f"the {name} tool", params, handler or Recorder(), toolset)


@pytest.fixture
def handlers() -> dict[str, Recorder]:
    return {name: Recorder(name) for name in ("read", "write", "search", "shell")}


@pytest.fixture
def registry(handlers: dict[str, Recorder]) -> ToolRegistry:
    return ToolRegistry([
        make_tool("read", "files", handlers["read"]),
        make_tool("write", "files", handlers["write"]),
        make_tool("search", "web", handlers["search"]),
        make_tool("shell", "system", handlers["shell"], required=("x",)),
    ])


CTX = ToolContext(platform="telegram", chat_id="100", user_id="42")


# --------------------------------------------------------------------------- registry and scopes


def test_registry_lists_tools_in_registration_order(registry: ToolRegistry) -> None:
    assert registry.names() == ["read", "write", "search", "shell"]
    assert registry.get("search").toolset == "web"
    assert registry.get("nope") is None


def test_duplicate_registration_is_rejected(registry: ToolRegistry) -> None:
    with pytest.raises(ValueError, match="'read' is already registered"):
        registry.register(make_tool("read"))
    with pytest.raises(ValueError, match="already registered"):
        ToolRegistry([make_tool("a"), make_tool("a")])
    assert registry.names() == ["read", "write", "search", "shell"]


def test_scope_without_limits_allows_everything(registry: ToolRegistry) -> None:
    scope = registry.scope()
    assert scope.allowed == {"read", "write", "search", "shell"}
    assert [s["function"]["name"] for s in scope.schemas()] == ["read", "search", "shell", "write"]


def test_scope_by_tools(registry: ToolRegistry) -> None:
    scope = registry.scope(tools=["read", "search", "not-registered"])
    assert scope.allowed == {"read", "search"}  # unknown names are dropped, not offered
    assert [s["function"]["name"] for s in scope.schemas()] == ["read", "search"]


def test_scope_by_toolsets(registry: ToolRegistry) -> None:
    assert registry.scope(toolsets=["files"]).allowed == {"read", "write"}
    assert registry.scope(toolsets=["files", "web"]).allowed == {"read", "write", "search"}
    assert registry.scope(toolsets=["nothing"]).allowed == frozenset()


def test_scope_by_tools_and_toolsets_is_the_union(registry: ToolRegistry) -> None:
    assert registry.scope(tools=["shell"], toolsets=["web"]).allowed == {"shell", "search"}


def test_empty_scope_offers_nothing(registry: ToolRegistry) -> None:
    scope = registry.scope(tools=[])
    assert scope.allowed == frozenset()
    assert scope.schemas() == []


def test_schema_shape() -> None:
    tool = make_tool("t", required=("x",))
    assert tool.schema() == {
        "type": "function",
        "function": {"name": "t", "description": "the t tool",
                     "parameters": {"type": "object", "properties": {"x": {"type": "string"}}, "required": ["x"]}},
    }


# --------------------------------------------------------------------------- calls


async def test_call_in_scope_runs_the_handler_with_context_and_arguments(
        registry: ToolRegistry, handlers: dict[str, Recorder]) -> None:
    result = await registry.scope(toolsets=["files"]).call("read", '{"x": "a.txt"}', CTX)
    assert result == 'read:{"x": "a.txt"}'
    assert handlers["read"].calls == [(CTX, {"x": "a.txt"})]


async def test_call_outside_the_scope_is_refused_and_never_runs(
        registry: ToolRegistry, handlers: dict[str, Recorder]) -> None:
    scope = registry.scope(toolsets=["files"])
    result = await scope.call("shell", '{"x": "rm -rf /"}', CTX)
    assert result == "error: tool 'shell' is not available in this conversation"
    assert handlers["shell"].calls == []
    # the same tool runs in a scope that allows it
    assert (await registry.scope(tools=["shell"]).call("shell", '{"x": "ls"}', CTX)).startswith("shell:")
    assert len(handlers["shell"].calls) == 1


async def test_call_to_an_unknown_tool(registry: ToolRegistry, handlers: dict[str, Recorder]) -> None:
    result = await registry.scope().call("teleport", "{}", CTX)
    assert result == "error: tool 'teleport' is not available in this conversation"
    assert all(not h.calls for h in handlers.values())


@pytest.mark.parametrize("raw", ['{"x": ', "{x: 1}", "not json", '{"x": "a"}}', "{'x': 'a'}"])
async def test_malformed_json_arguments(registry: ToolRegistry, handlers: dict[str, Recorder], raw: str) -> None:
    result = await registry.scope().call("read", raw, CTX)
    assert result.startswith("error: the arguments for read are not valid JSON (")
    assert result.endswith("); send a JSON object")
    assert handlers["read"].calls == []


@pytest.mark.parametrize("raw", ["[1, 2]", '"x"', "42", "null", "true"])
async def test_non_object_arguments(registry: ToolRegistry, handlers: dict[str, Recorder], raw: str) -> None:
    result = await registry.scope().call("read", raw, CTX)
    assert result == "error: the arguments for read must be a JSON object"
    assert handlers["read"].calls == []


async def test_empty_arguments_mean_no_arguments(registry: ToolRegistry, handlers: dict[str, Recorder]) -> None:
    assert await registry.scope().call("read", "", CTX) == "read:{}"
    assert handlers["read"].calls == [(CTX, {})]


async def test_missing_required_argument(registry: ToolRegistry, handlers: dict[str, Recorder]) -> None:
    result = await registry.scope().call("shell", "{}", CTX)
    assert result == "error: shell needs the argument(s): x"
    assert handlers["shell"].calls == []


async def test_unknown_arguments(registry: ToolRegistry, handlers: dict[str, Recorder]) -> None:
    result = await registry.scope().call("read", '{"x": "a", "zeta": 1, "alpha": 2}', CTX)
    assert result == "error: read does not take the argument(s): alpha, zeta"
    assert handlers["read"].calls == []


async def test_raising_handler_becomes_an_error_string() -> None:
    async def boom(ctx: ToolContext, **kwargs: Any) -> str:
        raise RuntimeError("disk on fire")

    registry = ToolRegistry([make_tool("boom", handler=boom)])
    assert await registry.scope().call("boom", "{}", CTX) == "error: boom failed: disk on fire"


async def test_handler_signature_mismatch_becomes_an_error_string() -> None:
    async def takes_nothing(ctx: ToolContext) -> str:
        return "never"

    registry = ToolRegistry([make_tool("narrow", handler=takes_nothing)])
    result = await registry.scope().call("narrow", '{"x": "1"}', CTX)
    assert result.startswith("error: narrow failed: ")
    assert "x" in result


async def test_cancellation_is_not_swallowed() -> None:
    started = asyncio.Event()

    async def slow(ctx: ToolContext, **kwargs: Any) -> str:
        started.set()
        await asyncio.Event().wait()
        return "never"

    registry = ToolRegistry([make_tool("slow", handler=slow)])
    task = asyncio.create_task(registry.scope().call("slow", "{}", CTX))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


# --------------------------------------------------------------------------- builtin tools

_STAMP = re.compile(r"^(\w+) (\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}) (\S+) \(UTC([+-]\d{4})\)$")


def parse_stamp(text: str) -> tuple[datetime, str, str]:
    match = _STAMP.match(text)
    assert match, text
    weekday, stamp, abbrev, offset = match.groups()
    when = datetime.strptime(f"{stamp} {offset}", "%Y-%m-%d %H:%M:%S %z")
    assert weekday == when.strftime("%A")
    return when, abbrev, offset


def test_builtin_tools_are_registered() -> None:
    registry = ToolRegistry(BUILTIN_TOOLS)
    assert registry.names() == ["current_time", "session_search"]
    assert registry.get("session_search").parameters["required"] == ["query"]


async def test_current_time_in_a_zone() -> None:
    text = await current_time(ToolContext(), tz="Asia/Tokyo")
    when, abbrev, offset = parse_stamp(text)
    assert abbrev == "JST" and offset == "+0900"
    assert abs(when - datetime.now(timezone.utc)) < timedelta(minutes=1)


async def test_current_time_defaults_to_utc() -> None:
    when, abbrev, offset = parse_stamp(await current_time(ToolContext()))
    assert (abbrev, offset) == ("UTC", "+0000")
    assert abs(when - datetime.now(timezone.utc)) < timedelta(minutes=1)


async def test_current_time_uses_the_configured_zone() -> None:
    _, abbrev, offset = parse_stamp(await current_time(ToolContext(timezone="Asia/Kolkata")))
    assert (abbrev, offset) == ("IST", "+0530")
    # an explicit zone beats the configured one
    _, abbrev, _ = parse_stamp(await current_time(ToolContext(timezone="Asia/Kolkata"), tz="UTC"))
    assert abbrev == "UTC"
    # a tzinfo object works too
    _, _, offset = parse_stamp(await current_time(ToolContext(timezone=ZoneInfo("Asia/Tokyo"))))
    assert offset == "+0900"


async def test_current_time_in_berlin_has_its_dst_offset() -> None:
    when, abbrev, offset = parse_stamp(await current_time(ToolContext(), tz="Europe/Berlin"))
    expected = datetime.now(ZoneInfo("Europe/Berlin"))
    assert abbrev == expected.strftime("%Z") and abbrev in ("CET", "CEST")
    assert offset == expected.strftime("%z")


@pytest.mark.parametrize("zone", ["Mars/Olympus", "Europe", "../../etc/passwd", "utc+2"])
async def test_current_time_with_a_bad_zone(zone: str) -> None:
    assert await current_time(ToolContext(), tz=zone) == (
        f"error: unknown time zone {zone!r}; use an IANA name such as Europe/Berlin")


async def test_current_time_with_a_bad_configured_zone_is_a_clear_error() -> None:
    result = await current_time(ToolContext(timezone="Nowhere/Land"))
    assert result == "error: unknown time zone 'Nowhere/Land'; use an IANA name such as Europe/Berlin"


async def test_current_time_through_the_scope_with_a_non_string_zone() -> None:
    result = await ToolRegistry(BUILTIN_TOOLS).scope().call("current_time", '{"tz": 5}', ToolContext())
    assert result == "error: unknown time zone 5; use an IANA name such as Europe/Berlin"


class StubSearch:
    def __init__(self, hits: list[SearchHit]) -> None:
        self.hits = hits
        self.calls: list[dict[str, Any]] = []

    async def search(self, query: str, *, platform: str, user_id: str, limit: int = 10) -> list[SearchHit]:
        self.calls.append({"query": query, "platform": platform, "user_id": user_id, "limit": limit})
        return self.hits


async def test_session_search_searches_the_contexts_user() -> None:
    created = datetime(2024, 5, 17, 9, 30, tzinfo=timezone.utc).timestamp()
    stub = StubSearch([SearchHit(7, "user", "my cat is called [Tom]", created),
                       SearchHit(9, "assistant", "Tom the cat", created + 3600)])
    ctx = ToolContext(platform="discord", chat_id="c1", user_id="u-55", transcripts=stub)
    result = await ToolRegistry(BUILTIN_TOOLS).scope(tools=["session_search"]).call(
        "session_search", '{"query": "cat name"}', ctx)
    assert stub.calls == [{"query": "cat name", "platform": "discord", "user_id": "u-55", "limit": 5}]
    assert result == ("Matches from your past conversations:\n"
                      "- session 7, 2024-05-17 09:30 UTC, user: my cat is called [Tom]\n"
                      "- session 9, 2024-05-17 10:30 UTC, assistant: Tom the cat")


@pytest.mark.parametrize(("limit", "sent"), [(1, 1), (20, 20), (100, 20), (0, 1), (-3, 1)])
async def test_session_search_limit_is_clamped(limit: int, sent: int) -> None:
    stub = StubSearch([])
    await session_search(ToolContext(platform="telegram", user_id="1", transcripts=stub), "x", limit=limit)
    assert stub.calls[0]["limit"] == sent


async def test_session_search_without_hits() -> None:
    stub = StubSearch([])
    result = await session_search(ToolContext(platform="telegram", user_id="1", transcripts=stub), "zebra")
    assert result == "No past messages match 'zebra'."
    assert stub.calls[0]["user_id"] == "1"


async def test_session_search_without_a_store() -> None:
    result = await ToolRegistry(BUILTIN_TOOLS).scope().call("session_search", '{"query": "x"}', ToolContext())
    assert result == "error: conversation search is not available here"


async def test_session_search_needs_a_query() -> None:
    stub = StubSearch([])
    ctx = ToolContext(platform="telegram", user_id="1", transcripts=stub)
    result = await ToolRegistry(BUILTIN_TOOLS).scope().call("session_search", '{"limit": 3}', ctx)
    assert result == "error: session_search needs the argument(s): query"
    assert stub.calls == []


async def test_session_search_refused_outside_the_scope() -> None:
    stub = StubSearch([])
    ctx = ToolContext(platform="telegram", user_id="1", transcripts=stub)
    result = await ToolRegistry(BUILTIN_TOOLS).scope(tools=["current_time"]).call(
        "session_search", '{"query": "secrets"}', ctx)
    assert result == "error: tool 'session_search' is not available in this conversation"
    assert stub.calls == []
