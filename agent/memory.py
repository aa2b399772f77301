"""The agent's memory: short markdown files it keeps across sessions.

* `memory/MEMORY.md` — the agent's own notes, shared by every session (2,200 characters);
* `memory/users/<platform>-<user id>.md` — what it knows about one person (1,375 characters).

Each file is a list of entries (`- text`, continuation lines indented). The `memory` tool adds,
replaces and removes entries; a write that would pass the limit is refused with a request to
consolidate, and text that looks like prompt injection or exfiltration is refused with the
reasons. They are documents (agent.documents: files in the home, or a database several gateway
instances share); each change is one read-modify-write that no other change of the same file comes
between (on any instance), so the next session anywhere sees it. The running session keeps the snapshot
it started with (see `snapshot`), which keeps its system prompt identical turn after turn. A person's file only ever enters a prompt of a
session with that person.
"""

from __future__ import annotations

import re

from agent.documents import Documents
from agent.safety.content_scan import describe, scan

MEMORY_LIMIT = 2200
USER_LIMIT = 1375
TARGETS = ("memory", "user")
_SAFE_ID = re.compile(r"[^A-Za-z0-9_.@+-]")


class MemoryRefused(ValueError):
    """A refused memory write; the message is for the model."""


class _Unchanged(Exception):
    """An update that would write what is there already: nothing is written."""


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


PENDING = "memory/PENDING.md"


class Memory:
    def __init__(self, documents: Documents) -> None:
        self.documents = documents

    @staticmethod
    def name(target: str, platform: str = "", user_id: str = "") -> str:
        """The document a target is kept in."""
        if target == "memory":
            return "memory/MEMORY.md"
        if target == "user":
            if not platform or not user_id:
                raise MemoryRefused("there is no person in this conversation to keep a profile of")
            return f"memory/users/{_SAFE_ID.sub('_', platform)}-{_SAFE_ID.sub('_', user_id)}.md"
        raise MemoryRefused(f"target must be one of {', '.join(TARGETS)}, not {target!r}")

    @staticmethod
    def limit(target: str) -> int:
        return MEMORY_LIMIT if target == "memory" else USER_LIMIT

    @staticmethod
    def _title(target: str, user_id: str) -> str:
        return "Memory" if target == "memory" else f"About {user_id}"

    async def read(self, target: str, platform: str = "", user_id: str = "") -> list[str]:
        return _entries(await self.documents.read(self.name(target, platform, user_id)) or "")

    async def change(self, action: str, target: str, *, text: str = "", old_text: str = "",
                     platform: str = "", user_id: str = "") -> str:
        """add | replace | remove one entry; returns what happened, raises MemoryRefused when refused."""
        name = self.name(target, platform, user_id)
        file = name.rsplit("/", 1)[-1]
        text = text.strip()
        if action in ("add", "replace"):
            _admissible(text, action)
        elif action != "remove":
            raise MemoryRefused(f"action must be add, replace or remove, not {action!r}")
        limit = self.limit(target)

        def edit(old: str | None) -> str:
            entries = _entries(old or "")
            if action == "add":
                if text in entries:
                    raise _Unchanged
                entries.append(text)
            else:
                index = self._find(entries, old_text)
                if action == "replace":
                    entries[index] = text
                else:
                    del entries[index]
            rendered = _render(self._title(target, user_id), entries)
            if len(rendered) > limit and action != "remove":
                raise MemoryRefused(
                    f"refused: {file} would be {len(rendered):,} of {limit:,} characters. Consolidate first: merge "
                    f"related entries with replace, or remove ones that no longer matter, then try again.")
            return rendered

        try:
            written = await self.documents.update(name, edit)
        except _Unchanged:
            return "Already noted."
        return f"{action}: done ({len(written or ''):,}/{limit:,} characters used in {file})."

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

    async def pending(self) -> list[str]:
        """Shared notes proposed from conversations of people who are not admins, not in any prompt yet."""
        return _entries(await self.documents.read(PENDING) or "")

    async def propose(self, text: str, platform: str, user_id: str) -> str:
        """Keep a shared note aside until an admin accepts it (`chatgate memory accept`)."""
        text = text.strip()
        _admissible(text, "add")
        entry = f"{text} [from {platform}:{user_id}]"

        def edit(old: str | None) -> str:
            entries = _entries(old or "")
            if entry in entries:
                raise _Unchanged
            return _render("Waiting for an admin", [*entries, entry])

        try:
            await self.documents.update(PENDING, edit)
        except _Unchanged:
            pass
        return ("noted for an admin to accept: shared notes from this conversation enter other people's prompts "
                "only once an admin accepts them (chatgate memory accept).")

    async def settle(self, number: int, accept: bool) -> str:
        """Accept (into the shared notes) or reject pending note `number` (1-based)."""
        entries = await self.pending()
        if not 1 <= number <= len(entries):
            raise MemoryRefused(f"there is no pending note {number} ({len(entries)} waiting)")
        entry = entries[number - 1]
        if accept:  # (refused: the note stays pending)
            await self.change("add", "memory", text=re.sub(r" \[from [^\]]*\]$", "", entry))

        def edit(old: str | None) -> str:
            waiting = _entries(old or "")
            if entry in waiting:
                waiting.remove(entry)
            return _render("Waiting for an admin", waiting)

        await self.documents.update(PENDING, edit)
        return f"{'accepted' if accept else 'rejected'}: {entry}"

    async def snapshot(self, platform: str = "", user_id: str = "") -> str:
        """The memory block of a new session's system prompt (entries that fail the scan are left out)."""
        parts = []
        for target, heading in (("memory", "Your notes (memory tool, target memory)"),
                                ("user", "About the person you are talking to (memory tool, target user)")):
            if target == "user" and not (platform and user_id):
                continue
            kept = [e for e in await self.read(target, platform, user_id) if not scan(e)]
            if kept:
                parts.append(f"## {heading}\n" + "\n".join("- " + e.replace("\n", "\n  ") for e in kept))
        return "\n\n".join(parts)
