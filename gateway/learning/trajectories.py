"""Finished sessions as ShareGPT-style JSONL, for fine-tuning (opt-in: `trajectories.enabled`).

One line per session in `$CHATGATE_HOME/trajectories/<UTC date>.jsonl`, written when a session
ends (`/new`, `/reset`, the end of a scheduled run):

    {"id": "<session id>", "platform": "telegram", "started_at": ..., "ended_at": ...,
     "conversations": [{"from": "system"|"human"|"gpt"|"tool", "value": "..."}]}

Tool calls appear in the assistant's turn as `<tool_call>{"name": ..., "arguments": ...}</tool_call>`
and their results as `tool` turns. Every value passes through the gateway's redaction (known
secrets from the configuration and secret-shaped strings) before it is written. Cancelled turns
are left out, as they are from the session's own history.

The files are an export the operator asked for, so they are kept until the operator moves them, unless
`trajectories.retention_days` is set: then the tick deletes the day files older than that (`prune`; only
files named as the export names them).
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from pathlib import Path
from typing import Any, Iterable

from gateway.ops.redact import redact
from gateway.storage.sessions import SessionStore

ROLES = {"system": "system", "user": "human", "assistant": "gpt", "tool": "tool"}
DAY_FILE = re.compile(r"(\d{4}-\d{2}-\d{2})\.jsonl")


def conversation(messages: list[dict[str, Any]], secrets: Iterable[str] = ()) -> list[dict[str, str]]:
    secrets = list(secrets)
    turns = []
    for m in messages:
        value = m.get("content") or ""
        for call in m.get("tool_calls") or ():
            fn = call.get("function", {})
            value += ("\n" if value else "") + "<tool_call>" + json.dumps(
                {"name": fn.get("name"), "arguments": fn.get("arguments")}, ensure_ascii=False) + "</tool_call>"
        turns.append({"from": ROLES.get(m["role"], m["role"]), "value": redact(value, secrets)})
    return turns


class Trajectories:
    def __init__(self, sessions: SessionStore, home: Path, secrets: Iterable[str] = ()) -> None:
        self.sessions = sessions
        self.dir = home / "trajectories"
        self.secrets = list(secrets)

    async def export(self, session_id: int) -> Path | None:
        """Append the session to today's file; None when it has no exchange worth keeping."""
        session = await self.sessions.facts(session_id)
        messages = await self.sessions.history(session_id, limit=10_000)
        if session is None or not any(m["role"] == "assistant" for m in messages):
            return None
        record = {"id": str(session_id), "platform": session.platform, "started_at": session.created_at,
                  "ended_at": session.ended_at, "conversations": conversation(messages, self.secrets)}
        path = self.dir / f"{time.strftime('%Y-%m-%d', time.gmtime())}.jsonl"
        await asyncio.to_thread(self._append, path, json.dumps(record, ensure_ascii=False) + "\n")
        return path

    @staticmethod
    def _append(path: Path, line: str) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8") as f:
            f.write(line)


def prune(folder: Path, keep_days: float) -> int:
    """Delete the day files in `folder` whose whole UTC day ended more than `keep_days` ago; return how
    many (blocking: run it in a thread)."""
    oldest = time.strftime("%Y-%m-%d", time.gmtime(time.time() - keep_days * 86400))
    removed = 0
    for path in folder.iterdir() if folder.is_dir() else ():
        match = DAY_FILE.fullmatch(path.name)
        if match and match.group(1) < oldest and path.is_file() and not path.is_symlink():
            path.unlink(missing_ok=True)
            removed += 1
    return removed
