"""The agent's memory: short markdown files it keeps across sessions.

* `memory/MEMORY.md` — the agent's own notes, shared by every session (2,200 characters);
* `memory/users/<platform>-<user id>.md` — what it knows about one person (1,375 characters).

Each file is a list of entries (`- text`, continuation lines indented). The `memory` tool adds,
replaces and removes entries; a write that would pass the limit is refused with a request to
consolidate, and text that looks like prompt injection or exfiltration is refused with the
reasons. Files are written at once, atomically (temporary file + rename), so the next session
sees them; the running session keeps the snapshot it started with (see `snapshot`), which keeps
its system prompt identical turn after turn. A person's file only ever enters a prompt of a
session with that person.
"""

from __future__ import annotations

import asyncio
import os
import re
import tempfile
from pathlib import Path

from agent.safety.content_scan import describe, scan

MEMORY_LIMIT = 2200
USER_LIMIT = 1375
TARGETS = ("memory", "user")
_SAFE_ID = re.compile(r"[^A-Za-z0-9_.@+-]")


class MemoryRefused(ValueError):
    """A refused memory write; the message is for the model."""


def _admissible(text: str, action: str) -> None:
    """Refuse an empty note, or one that must not reach a prompt (the scanner's findings)."""
    if not text:
        raise MemoryRefused(f"{action} needs the text to keep")
    findings = scan(text)
    if findings:
        raise MemoryRefused("refused: this text must not enter a prompt:\n" + describe(findings))


def _entries(text: str) -> list[str]:
    entries: list[str] = []
    for line in text.splitlines():
        if line.startswith("- "):
            entries.append(line[2:].rstrip())
        elif line.strip() and entries:
            entries[-1] += "\n" + line.strip()
        elif line.strip() and not line.startswith("#"):
            entries.append(line.strip())  # hand-written text without a bullet
    return entries


def _render(title: str, entries: list[str]) -> str:
    body = "".join("- " + e.replace("\n", "\n  ") + "\n" for e in entries)
    return f"# {title}\n\n{body}"


def write_atomic(path: Path, text: str) -> None:
    """Replace `path` with `text` so a reader sees the old file or the new one, never half."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


class Memory:
    def __init__(self, home: Path) -> None:
        self.dir = home / "memory"
        self._locks: dict[Path, asyncio.Lock] = {}

    def path(self, target: str, platform: str = "", user_id: str = "") -> Path:
        if target == "memory":
            return self.dir / "MEMORY.md"
        if target == "user":
            if not platform or not user_id:
                raise MemoryRefused("there is no person in this conversation to keep a profile of")
            return self.dir / "users" / f"{_SAFE_ID.sub('_', platform)}-{_SAFE_ID.sub('_', user_id)}.md"
        raise MemoryRefused(f"target must be one of {', '.join(TARGETS)}, not {target!r}")

    @staticmethod
    def limit(target: str) -> int:
        return MEMORY_LIMIT if target == "memory" else USER_LIMIT

    @staticmethod
    def _title(target: str, user_id: str) -> str:
        return "Memory" if target == "memory" else f"About {user_id}"

    def read(self, target: str, platform: str = "", user_id: str = "") -> list[str]:
        try:
            return _entries(self.path(target, platform, user_id).read_text(encoding="utf-8"))
        except FileNotFoundError:
            return []

    async def change(self, action: str, target: str, *, text: str = "", old_text: str = "",
                     platform: str = "", user_id: str = "") -> str:
        """add | replace | remove one entry; returns what happened, raises MemoryRefused when refused."""
        path = self.path(target, platform, user_id)
        lock = self._locks.setdefault(path, asyncio.Lock())
        async with lock:
            entries = await asyncio.to_thread(self.read, target, platform, user_id)
            text = text.strip()
            if action in ("add", "replace"):
                _admissible(text, action)
            if action == "add":
                if text in entries:
                    return "Already noted."
                entries.append(text)
            elif action in ("replace", "remove"):
                index = self._find(entries, old_text)
                if action == "replace":
                    entries[index] = text
                else:
                    del entries[index]
            else:
                raise MemoryRefused(f"action must be add, replace or remove, not {action!r}")
            rendered = _render(self._title(target, user_id), entries)
            used, limit = len(rendered), self.limit(target)
            if used > limit and action != "remove":
                raise MemoryRefused(
                    f"refused: {path.name} would be {used:,} of {limit:,} characters. Consolidate first: merge "
                    f"related entries with replace, or remove ones that no longer matter, then try again.")
            await asyncio.to_thread(write_atomic, path, rendered)
        return f"{action}: done ({used:,}/{limit:,} characters used in {path.name})."

    @staticmethod
    def _find(entries: list[str], old_text: str) -> int:
        old = old_text.strip()
        if not old:
            raise MemoryRefused("replace and remove need old_text: a unique part of the entry to change")
        found = [i for i, e in enumerate(entries) if old in e]
        if not found:
            raise MemoryRefused(f"no entry contains {old!r}")
        if len(found) > 1:
            raise MemoryRefused(f"{len(found)} entries contain {old!r}; give a longer, unique part")
        return found[0]

    # -- notes waiting for an admin ------------------------------------------------------------

    @property
    def pending_path(self) -> Path:
        return self.dir / "PENDING.md"

    def pending(self) -> list[str]:
        """Shared notes proposed from conversations of people who are not admins, not in any prompt yet."""
        try:
            return _entries(self.pending_path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return []

    async def propose(self, text: str, platform: str, user_id: str) -> str:
        """Keep a shared note aside until an admin accepts it (`chatgate memory accept`)."""
        text = text.strip()
        _admissible(text, "add")
        lock = self._locks.setdefault(self.pending_path, asyncio.Lock())
        async with lock:
            entries = self.pending()
            entry = f"{text} [from {platform}:{user_id}]"
            if entry not in entries:
                entries.append(entry)
                await asyncio.to_thread(write_atomic, self.pending_path, _render("Waiting for an admin", entries))
        return ("noted for an admin to accept: shared notes from this conversation enter other people's prompts "
                "only once an admin accepts them (chatgate memory accept).")

    async def settle(self, number: int, accept: bool) -> str:
        """Accept (into the shared notes) or reject pending note `number` (1-based)."""
        lock = self._locks.setdefault(self.pending_path, asyncio.Lock())
        async with lock:
            entries = self.pending()
            if not 1 <= number <= len(entries):
                raise MemoryRefused(f"there is no pending note {number} ({len(entries)} waiting)")
            entry = entries.pop(number - 1)
            if accept:
                await self.change("add", "memory", text=re.sub(r" \[from [^\]]*\]$", "", entry))
            await asyncio.to_thread(write_atomic, self.pending_path, _render("Waiting for an admin", entries))
        return f"{'accepted' if accept else 'rejected'}: {entry}"

    def snapshot(self, platform: str = "", user_id: str = "") -> str:
        """The memory block of a new session's system prompt (entries that fail the scan are left out)."""
        parts = []
        for target, heading in (("memory", "Your notes (memory tool, target memory)"),
                                ("user", "About the person you are talking to (memory tool, target user)")):
            if target == "user" and not (platform and user_id):
                continue
            kept = [e for e in self.read(target, platform, user_id) if not scan(e)]
            if kept:
                parts.append(f"## {heading}\n" + "\n".join("- " + e.replace("\n", "\n  ") for e in kept))
        return "\n\n".join(parts)
