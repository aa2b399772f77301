"""The first tools: the current time and a search over the user's past conversations."""

from __future__ import annotations

from datetime import datetime, timezone
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from agent.tools.contract import Tool, ToolContext


async def current_time(ctx: ToolContext, tz: str | None = None) -> str:
    default = ctx.timezone
    name = tz or (default if isinstance(default, str) else None)
    try:
        zone = ZoneInfo(name) if name else default or timezone.utc
    except (ZoneInfoNotFoundError, ValueError, TypeError, OSError):
        return f"error: unknown time zone {name!r}; use an IANA name such as Europe/Berlin"
    now = datetime.now(zone)
    return now.strftime("%A %Y-%m-%d %H:%M:%S %Z (UTC%z)")


async def session_search(ctx: ToolContext, query: str, limit: int = 5) -> str:
    if ctx.transcripts is None:
        return "error: conversation search is not available here"
    hits = await ctx.transcripts.search(query, platform=ctx.platform, user_id=ctx.user_id,
                                        limit=max(1, min(int(limit), 20)))
    shared = ctx.conversation_only  # the gateway lends a search of this conversation only
    if not hits:
        return f"No {'earlier messages of this conversation' if shared else 'past messages'} match {query!r}."
    lines = [f"- session {h.session_id}, {datetime.fromtimestamp(h.created_at, timezone.utc):%Y-%m-%d %H:%M} UTC,"
             f" {h.role}: {h.snippet}" for h in hits]
    where = ("this conversation (others read what is answered here, so nothing else is searched)"
             if shared else "your past conversations")
    return f"Matches from {where}:\n" + "\n".join(lines)


BUILTIN_TOOLS = (
    Tool("current_time", "The current date and time, optionally in an IANA time zone.",
         {"type": "object", "properties": {"tz": {"type": "string", "description": "e.g. Europe/Berlin"}}},
         current_time),
    Tool("session_search",
         "Full-text search over past conversations: in a direct chat, this person's (earlier sessions too, and "
         "shared chats they took part in); in a group, channel or thread, only this conversation.",
         {"type": "object", "required": ["query"],
          "properties": {"query": {"type": "string", "description": "words to look for"},
                         "limit": {"type": "integer", "minimum": 1, "maximum": 20}}},
         session_search),
)
