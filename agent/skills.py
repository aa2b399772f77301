"""Skills: procedures the agent writes down and reuses, one folder each under `skills/`.

    skills/<name>/SKILL.md          YAML front matter (name, description) + the procedure
    skills/<name>/references/...    optional supporting files
    skills/<name>/templates/...
    skills/<name>/scripts/...
    skills/.archive/<name>/         archived skills (restorable); removed files go here too

Every write is validated (name, sizes, paths) and scanned (`agent.safety.content_scan`); a refused
write says why. Nothing is ever deleted: archive moves a skill aside, `remove_file` moves the
file into the archive. Who wrote a skill (provenance: user, agent, review, bundled) and how it
is used (views, last use) are kept by the gateway through the `SkillUsage` port; the system
prompt carries only the index of names and descriptions (`index()`), bodies load on demand.
"""

from __future__ import annotations

import asyncio
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Protocol

import yaml

from agent.safety.content_scan import describe, scan
from agent.memory import write_atomic

NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")
MAX_DESCRIPTION = 1024
MAX_BODY = 100_000
MAX_FILE = 100_000
FILE_DIRS = ("references", "templates", "scripts")
PROVENANCES = ("user", "agent", "review", "bundled")
_FRONT = re.compile(r"\A---\n(.*?)\n---\n?(.*)\Z", re.S)


class SkillRefused(ValueError):
    """A refused skill operation; the message is for the model (or the operator)."""


class SkillUsage(Protocol):
    """Provenance and usage, kept by the gateway."""

    async def skill_written(self, name: str, provenance: str) -> None: ...  # the first writer stays its provenance
    async def skill_viewed(self, name: str) -> None: ...
    async def set_skill_state(self, name: str, state: str) -> None: ...


@dataclass(frozen=True, slots=True)
class Skill:
    name: str
    description: str
    body: str
    path: Path

    def files(self) -> list[str]:
        return sorted(str(p.relative_to(self.path.parent)) for d in FILE_DIRS
                      for p in (self.path.parent / d).rglob("*") if p.is_file())


def parse(text: str, path: Path) -> Skill:
    m = _FRONT.match(text.replace("\r\n", "\n"))
    if not m:
        raise SkillRefused(f"{path}: SKILL.md must start with YAML front matter between --- lines")
    try:
        meta = yaml.safe_load(m.group(1)) or {}
    except yaml.YAMLError as exc:
        raise SkillRefused(f"{path}: front matter is not valid YAML ({exc.__class__.__name__})") from None
    if not isinstance(meta, dict):
        raise SkillRefused(f"{path}: front matter must be a mapping with name and description")
    return Skill(str(meta.get("name", "")), str(meta.get("description", "")).strip(), m.group(2).lstrip("\n"), path)


def render(name: str, description: str, body: str) -> str:
    front = yaml.safe_dump({"name": name, "description": description}, allow_unicode=True, sort_keys=False,
                           width=1000)
    return f"---\n{front}---\n\n{body.strip()}\n"


def check(name: str, description: str, body: str) -> None:
    if not NAME.match(name):
        raise SkillRefused(f"name {name!r} must match {NAME.pattern} (lower case, digits, . _ -; up to 64)")
    if not description.strip():
        raise SkillRefused("a skill needs a one-line description of when to use it")
    if len(description) > MAX_DESCRIPTION:
        raise SkillRefused(f"description is {len(description):,} characters; the limit is {MAX_DESCRIPTION:,}")
    if not body.strip():
        raise SkillRefused("a skill needs a body: the procedure itself")
    if len(body) > MAX_BODY:
        raise SkillRefused(f"body is {len(body):,} characters; the limit is {MAX_BODY:,}")
    findings = scan(f"{description}\n{body}")
    if findings:
        raise SkillRefused("refused: this skill looks dangerous:\n" + describe(findings))


class SkillLibrary:
    def __init__(self, home: Path, ledger: SkillUsage | None = None) -> None:
        self.root = home / "skills"
        self.archive_dir = self.root / ".archive"
        self.pending_dir = self.root / ".pending"  # proposals from conversations of people who are not admins
        self.ledger = ledger
        self._lock = asyncio.Lock()
        self._index: str | None = None
        self._indexed: tuple[tuple[str, int], ...] = ()

    # -- reading ---------------------------------------------------------------------------

    def _dir(self, name: str) -> Path:
        if not NAME.match(name):
            raise SkillRefused(f"no skill {name!r} (names match {NAME.pattern})")
        return self.root / name

    def get(self, name: str) -> Skill | None:
        path = self._dir(name) / "SKILL.md"
        try:
            return parse(path.read_text(encoding="utf-8"), path)
        except FileNotFoundError:
            return None

    def all(self) -> list[Skill]:
        found = []
        if self.root.is_dir():
            for path in sorted(self.root.glob("*/SKILL.md")):
                if path.parent.name.startswith("."):
                    continue
                try:
                    found.append(parse(path.read_text(encoding="utf-8"), path))
                except (SkillRefused, OSError, UnicodeDecodeError):
                    continue  # a broken hand-edited file is not offered to the model
        return found

    def archived(self) -> list[str]:
        return sorted(p.name for p in self.archive_dir.glob("*") if (p / "SKILL.md").is_file())

    def _signature(self) -> tuple[tuple[str, int], ...]:
        """What the index depends on: every SKILL.md and when it changed (hand edits, the CLI, other processes)."""
        found = []
        for path in self.root.glob("*/SKILL.md") if self.root.is_dir() else ():
            try:
                found.append((path.parent.name, path.stat().st_mtime_ns))
            except OSError:
                continue
        return tuple(sorted(found))

    def index(self) -> str:
        """Names and descriptions for the system prompt (cached; rebuilt after any change)."""
        signature = self._signature()
        if self._index is None or signature != self._indexed:
            self._indexed = signature
            lines = [f"- {s.name}: {' '.join(s.description.split())}" for s in self.all()
                     if NAME.match(s.name) and not scan(s.description)]
            self._index = ("## Skills (procedures you wrote before; load one with skill_view when it applies)\n"
                           + "\n".join(lines)) if lines else ""
        return self._index

    def changed(self) -> None:
        self._index = None

    async def view(self, name: str, file: str | None = None) -> str:
        skill = self.get(name)
        if skill is None:
            raise SkillRefused(f"no skill {name!r}; skills_list shows what there is")
        if self.ledger is not None:
            await self.ledger.skill_viewed(name)
        if file:
            path = self._file_path(name, file)
            if not path.is_file():
                raise SkillRefused(f"{name} has no file {file!r}; it has: {', '.join(skill.files()) or 'none'}")
            return path.read_text(encoding="utf-8", errors="replace")
        files = skill.files()
        extra = f"\n\nFiles: {', '.join(files)} (skill_view with file=...)" if files else ""
        return f"# {skill.name}\n{skill.description}\n\n{skill.body}{extra}"

    # -- writing ---------------------------------------------------------------------------

    async def create(self, name: str, description: str, body: str, *, provenance: str) -> str:
        async with self._lock:
            await asyncio.to_thread(check, name, description, body)
            if self.get(name) is not None:
                raise SkillRefused(f"skill {name!r} exists; patch or edit it instead")
            if (self.archive_dir / name).exists():
                raise SkillRefused(f"skill {name!r} is archived; restore it, or choose another name")
            await self._write(name, description, body, provenance)
        return f"Created skill {name}."

    async def edit(self, name: str, *, description: str | None = None, body: str | None = None,
                   provenance: str) -> str:
        async with self._lock:
            skill = self._existing(name)
            new_description = skill.description if description is None else description.strip()
            new_body = skill.body if body is None else body
            await asyncio.to_thread(check, name, new_description, new_body)
            await self._write(name, new_description, new_body, provenance)
        return f"Updated skill {name}."

    async def patch(self, name: str, old_text: str, new_text: str, *, provenance: str) -> str:
        async with self._lock:
            skill = self._existing(name)
            count = skill.body.count(old_text) if old_text else 0
            if count != 1:
                raise SkillRefused(f"old_text must occur exactly once in {name}'s body (found {count} times)")
            body = skill.body.replace(old_text, new_text)
            await asyncio.to_thread(check, name, skill.description, body)
            await self._write(name, skill.description, body, provenance)
        return f"Patched skill {name}."

    async def write_file(self, name: str, file: str, content: str, *, provenance: str) -> str:
        async with self._lock:
            self._existing(name)
            path = self._file_path(name, file)
            if len(content) > MAX_FILE:
                raise SkillRefused(f"file is {len(content):,} characters; the limit is {MAX_FILE:,}")
            kind = "script" if file.startswith("scripts/") else "text"
            findings = await asyncio.to_thread(scan, content, kind=kind)
            if findings:
                raise SkillRefused("refused: this file looks dangerous:\n" + describe(findings))
            await asyncio.to_thread(write_atomic, path, content)
            await self._note(name, provenance)
        return f"Wrote {name}/{file}."

    async def remove_file(self, name: str, file: str, *, provenance: str) -> str:
        async with self._lock:
            self._existing(name)
            path = self._file_path(name, file)
            if not path.is_file():
                raise SkillRefused(f"{name} has no file {file!r}")
            dest = self.archive_dir / ".removed" / name / time.strftime("%Y%m%dT%H%M%S") / file
            dest.parent.mkdir(parents=True, exist_ok=True)
            await asyncio.to_thread(shutil.move, str(path), str(dest))
            await self._note(name, provenance)
        return f"Removed {name}/{file} (kept in {dest.relative_to(self.root)})."

    async def archive(self, name: str) -> str:
        async with self._lock:
            self._existing(name)
            dest = self.archive_dir / name
            if dest.exists():  # an older archived copy: keep it under a dated name
                older = self.archive_dir / ".removed" / f"{name}-{time.strftime('%Y%m%dT%H%M%S')}"
                older.parent.mkdir(parents=True, exist_ok=True)
                dest.rename(older)
            self.archive_dir.mkdir(parents=True, exist_ok=True)
            await asyncio.to_thread(shutil.move, str(self._dir(name)), str(dest))
            self.changed()
            if self.ledger is not None:
                await self.ledger.set_skill_state(name, "archived")
        return f"Archived skill {name} (restorable)."

    async def restore(self, name: str) -> str:
        async with self._lock:
            source = self.archive_dir / name
            if not (source / "SKILL.md").is_file():
                raise SkillRefused(f"no archived skill {name!r}")
            if self._dir(name).exists():
                raise SkillRefused(f"a skill {name!r} exists again; archive or rename it first")
            await asyncio.to_thread(shutil.move, str(source), str(self._dir(name)))
            self.changed()
            if self.ledger is not None:
                await self.ledger.set_skill_state(name, "active")
        return f"Restored skill {name}."

    # -- proposals waiting for an admin ---------------------------------------------------------

    async def propose(self, action: str, name: str, *, description: str | None = None, body: str | None = None,
                      old_text: str = "", new_text: str = "", proposer: str = "") -> str:
        """The skill `action` would write, kept aside (no prompt sees it) until `accept`."""
        async with self._lock:
            current = self.get(name)
            if action == "create":
                if current is not None:
                    raise SkillRefused(f"skill {name!r} exists; patch or edit it instead")
                new_description, new_body = (description or "").strip(), body or ""
            elif action in ("edit", "patch"):
                skill = self._existing(name)
                new_description = skill.description if description is None or action == "patch" else description.strip()
                new_body = skill.body if body is None or action == "patch" else body
                if action == "patch":
                    if skill.body.count(old_text) != 1 or not old_text:
                        raise SkillRefused(f"old_text must occur exactly once in {name}'s body")
                    new_body = skill.body.replace(old_text, new_text)
            else:
                raise SkillRefused("from this conversation a skill can be created, edited or patched, and the "
                                   "change waits for an admin")
            await asyncio.to_thread(check, name, new_description, new_body)
            folder = self.pending_dir / name
            await asyncio.to_thread(write_atomic, folder / "SKILL.md", render(name, new_description, new_body))
            await asyncio.to_thread(write_atomic, folder / "PROPOSED_BY", proposer + "\n")
        return (f"Proposed skill {name}: it waits for an admin (chatgate skills accept {name}) and no prompt "
                "sees it until then.")

    def proposals(self) -> list[tuple[str, str]]:
        """(name, who proposed it) of every skill waiting for an admin."""
        found = []
        for path in sorted(self.pending_dir.glob("*/SKILL.md")):
            who = path.parent / "PROPOSED_BY"
            found.append((path.parent.name, who.read_text().strip() if who.is_file() else "?"))
        return found

    async def settle(self, name: str, accept: bool, *, by: str = "admin") -> str:
        """Accept a proposal (it becomes the skill) or reject it."""
        folder = self.pending_dir / name
        if not (folder / "SKILL.md").is_file():
            raise SkillRefused(f"no proposed skill {name!r}")
        if accept:
            proposed = parse((folder / "SKILL.md").read_text(encoding="utf-8"), folder / "SKILL.md")
            async with self._lock:
                await asyncio.to_thread(check, name, proposed.description, proposed.body)
                await self._write(name, proposed.description, proposed.body, by)
        await asyncio.to_thread(shutil.rmtree, folder)
        return f"{'Accepted' if accept else 'Rejected'} the proposed skill {name}."

    # -- helpers ---------------------------------------------------------------------------

    def _existing(self, name: str) -> Skill:
        skill = self.get(name)
        if skill is None:
            raise SkillRefused(f"no skill {name!r}; create it first")
        return skill

    def _file_path(self, name: str, file: str) -> Path:
        rel = PurePosixPath(file)
        if rel.is_absolute() or ".." in rel.parts or len(rel.parts) < 2 or rel.parts[0] not in FILE_DIRS:
            raise SkillRefused(f"file must be a relative path under {', '.join(FILE_DIRS)}/, e.g. scripts/run.sh")
        return self._dir(name).joinpath(*rel.parts)

    async def _write(self, name: str, description: str, body: str, provenance: str) -> None:
        await asyncio.to_thread(write_atomic, self._dir(name) / "SKILL.md", render(name, description, body))
        self.changed()
        await self._note(name, provenance)

    async def _note(self, name: str, provenance: str) -> None:
        if self.ledger is not None:
            await self.ledger.skill_written(name, provenance)


def summary(skill: Skill, meta: dict[str, Any] | None = None) -> str:
    """One line for listings: name — description [provenance, views]."""
    extra = ""
    if meta:
        extra = f" [{meta.get('provenance', '?')}, {meta.get('views', 0)} views" + (
            ", pinned" if meta.get("pinned") else "") + "]"
    return f"{skill.name} — {skill.description}{extra}"
