"""Skills: procedures the agent writes down and reuses, one folder each under `skills/`.

    skills/<name>/SKILL.md          YAML front matter (name, description) + the procedure
    skills/<name>/references/...    optional supporting files
    skills/<name>/templates/...
    skills/<name>/scripts/...
    skills/.archive/<name>/         archived skills (restorable); removed files go here too

The folders are documents (agent.documents: files in the home, or a database several gateway instances
share, where a skill one instance writes is in the next new session's index on every other).
Every write is validated (name, sizes, paths) and scanned (`agent.safety.content_scan`); a refused
write says why. Nothing is ever deleted: archive moves a skill aside, `remove_file` moves the
file into the archive. Who wrote a skill (provenance: user, agent, review, bundled) and how it
is used (views, last use) are kept by the gateway through the `SkillUsage` port; the system
prompt carries only the index of names and descriptions (`index()`), bodies load on demand.
"""

from __future__ import annotations

import asyncio
import re
import time
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any, Hashable, Protocol

import yaml

from agent.documents import BadName, Documents
from agent.safety.content_scan import describe, scan

NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")
MAX_DESCRIPTION = 1024
MAX_BODY = 100_000
MAX_FILE = 100_000
FILE_DIRS = ("references", "templates", "scripts")
PROVENANCES = ("user", "agent", "review", "bundled")
ROOT = "skills"
ARCHIVE = f"{ROOT}/.archive"
PENDING = f"{ROOT}/.pending"  # proposals from conversations of people who are not admins
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
    document: str  # the name of its SKILL.md


def parse(text: str, path: object) -> Skill:
    m = _FRONT.match(text.replace("\r\n", "\n"))
    if not m:
        raise SkillRefused(f"{path}: SKILL.md must start with YAML front matter between --- lines")
    try:
        meta = yaml.safe_load(m.group(1)) or {}
    except yaml.YAMLError as exc:
        raise SkillRefused(f"{path}: front matter is not valid YAML ({exc.__class__.__name__})") from None
    if not isinstance(meta, dict):
        raise SkillRefused(f"{path}: front matter must be a mapping with name and description")
    return Skill(str(meta.get("name", "")), str(meta.get("description", "")).strip(), m.group(2).lstrip("\n"), str(path))


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
    def __init__(self, documents: Documents, ledger: SkillUsage | None = None) -> None:
        self.documents = documents
        self.ledger = ledger
        self._lock = asyncio.Lock()
        self._index: str | None = None
        self._indexed: Hashable = None

    # -- reading ---------------------------------------------------------------------------

    @staticmethod
    def _dir(name: str) -> str:
        if not NAME.match(name):
            raise SkillRefused(f"no skill {name!r} (names match {NAME.pattern})")
        return f"{ROOT}/{name}"

    async def get(self, name: str) -> Skill | None:
        document = f"{self._dir(name)}/SKILL.md"
        text = await self.documents.read(document)
        return None if text is None else parse(text, document)

    async def all(self) -> list[Skill]:
        found = []
        for document in sorted(await self.documents.names(f"{ROOT}/"), key=lambda n: n.split("/")):
            parts = document.split("/")
            if len(parts) != 3 or parts[2] != "SKILL.md" or parts[1].startswith("."):
                continue
            try:
                text = await self.documents.read(document)
                if text is not None:
                    found.append(parse(text, document))
            except (SkillRefused, OSError, UnicodeDecodeError, ValueError):
                continue  # a broken hand-edited file is not offered to the model
        return found

    async def archived(self) -> list[str]:
        return sorted(parts[2] for parts in (n.split("/") for n in await self.documents.names(f"{ARCHIVE}/"))
                      if len(parts) == 4 and parts[3] == "SKILL.md")

    async def files(self, name: str) -> list[str]:
        """The skill's supporting files (`scripts/run.sh`, ...), relative to its folder."""
        folder = self._dir(name) + "/"
        return [n[len(folder):] for n in await self.documents.names(folder) if n[len(folder):].split("/")[0] in FILE_DIRS]

    async def index(self) -> str:
        """Names and descriptions for the system prompt (cached while the documents' stamp stays the same:
        any change, by this process or another, by hand, the CLI or another instance, rebuilds it)."""
        stamp = await self.documents.stamp()
        if self._index is None or stamp != self._indexed:
            lines = [f"- {s.name}: {' '.join(s.description.split())}" for s in await self.all()
                     if NAME.match(s.name) and not scan(s.description)]
            self._index = ("## Skills (procedures you wrote before; load one with skill_view when it applies)\n"
                           + "\n".join(lines)) if lines else ""
            self._indexed = stamp
        return self._index

    def changed(self) -> None:
        self._index = None

    async def view(self, name: str, file: str | None = None) -> str:
        skill = await self.get(name)
        if skill is None:
            raise SkillRefused(f"no skill {name!r}; skills_list shows what there is")
        if self.ledger is not None:
            await self.ledger.skill_viewed(name)
        files = await self.files(name)
        if file:
            try:
                text = await self.documents.read(self._file_name(name, file))
            except UnicodeDecodeError:
                raise SkillRefused(f"{name}/{file} is not text") from None
            except BadName as exc:
                raise SkillRefused(str(exc)) from None
            if text is None:
                raise SkillRefused(f"{name} has no file {file!r}; it has: {', '.join(files) or 'none'}")
            return text
        extra = f"\n\nFiles: {', '.join(files)} (skill_view with file=...)" if files else ""
        return f"# {skill.name}\n{skill.description}\n\n{skill.body}{extra}"

    # -- writing ---------------------------------------------------------------------------

    async def create(self, name: str, description: str, body: str, *, provenance: str) -> str:
        async with self._lock:
            await asyncio.to_thread(check, name, description, body)
            if await self.get(name) is not None:
                raise SkillRefused(f"skill {name!r} exists; patch or edit it instead")
            if await self.documents.names(f"{ARCHIVE}/{name}/"):
                raise SkillRefused(f"skill {name!r} is archived; restore it, or choose another name")
            await self._write(name, description, body, provenance, expected=None)
        return f"Created skill {name}."

    async def edit(self, name: str, *, description: str | None = None, body: str | None = None,
                   provenance: str) -> str:
        async with self._lock:
            skill, text = await self._existing_text(name)
            new_description = skill.description if description is None else description.strip()
            new_body = skill.body if body is None else body
            await asyncio.to_thread(check, name, new_description, new_body)
            await self._write(name, new_description, new_body, provenance, expected=text)
        return f"Updated skill {name}."

    async def patch(self, name: str, old_text: str, new_text: str, *, provenance: str) -> str:
        async with self._lock:
            skill, text = await self._existing_text(name)
            count = skill.body.count(old_text) if old_text else 0
            if count != 1:
                raise SkillRefused(f"old_text must occur exactly once in {name}'s body (found {count} times)")
            body = skill.body.replace(old_text, new_text)
            await asyncio.to_thread(check, name, skill.description, body)
            await self._write(name, skill.description, body, provenance, expected=text)
        return f"Patched skill {name}."

    async def write_file(self, name: str, file: str, content: str, *, provenance: str) -> str:
        async with self._lock:
            await self._existing(name)
            document = self._file_name(name, file)
            if len(content) > MAX_FILE:
                raise SkillRefused(f"file is {len(content):,} characters; the limit is {MAX_FILE:,}")
            kind = "script" if file.startswith("scripts/") else "text"
            findings = await asyncio.to_thread(scan, content, kind=kind)
            if findings:
                raise SkillRefused("refused: this file looks dangerous:\n" + describe(findings))
            try:
                await self.documents.write(document, content)
            except BadName as exc:
                raise SkillRefused(str(exc)) from None
            await self._note(name, provenance)
        return f"Wrote {name}/{file}."

    async def remove_file(self, name: str, file: str, *, provenance: str) -> str:
        async with self._lock:
            await self._existing(name)
            document = self._file_name(name, file)
            if file not in await self.files(name):
                raise SkillRefused(f"{name} has no file {file!r}")
            kept = f".archive/.removed/{name}/{time.strftime('%Y%m%dT%H%M%S')}/{file}"
            await self.documents.move(document, f"{ROOT}/{kept}")
            await self._note(name, provenance)
        return f"Removed {name}/{file} (kept in {kept})."

    async def archive(self, name: str) -> str:
        async with self._lock:
            await self._existing(name)
            dest = f"{ARCHIVE}/{name}"
            if await self.documents.names(dest + "/"):  # an older archived copy: keep it under a dated name
                await self.documents.move(dest, f"{ARCHIVE}/.removed/{name}-{time.strftime('%Y%m%dT%H%M%S')}")
            await self.documents.move(self._dir(name), dest)
            self.changed()
            if self.ledger is not None:
                await self.ledger.set_skill_state(name, "archived")
        return f"Archived skill {name} (restorable)."

    async def restore(self, name: str) -> str:
        async with self._lock:
            source = f"{ARCHIVE}/{self._dir(name).split('/')[1]}"
            if await self.documents.read(f"{source}/SKILL.md") is None:
                raise SkillRefused(f"no archived skill {name!r}")
            if await self.documents.names(self._dir(name) + "/"):
                raise SkillRefused(f"a skill {name!r} exists again; archive or rename it first")
            await self.documents.move(source, self._dir(name))
            self.changed()
            if self.ledger is not None:
                await self.ledger.set_skill_state(name, "active")
        return f"Restored skill {name}."

    # -- proposals waiting for an admin ---------------------------------------------------------

    async def propose(self, action: str, name: str, *, description: str | None = None, body: str | None = None,
                      old_text: str = "", new_text: str = "", proposer: str = "") -> str:
        """The skill `action` would write, kept aside (no prompt sees it) until `accept`."""
        async with self._lock:
            current = await self.get(name)
            if action == "create":
                if current is not None:
                    raise SkillRefused(f"skill {name!r} exists; patch or edit it instead")
                new_description, new_body = (description or "").strip(), body or ""
            elif action in ("edit", "patch"):
                skill = await self._existing(name)
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
            folder = f"{PENDING}/{name}"
            await self.documents.write(f"{folder}/SKILL.md", render(name, new_description, new_body))
            await self.documents.write(f"{folder}/PROPOSED_BY", proposer + "\n")
        return (f"Proposed skill {name}: it waits for an admin (chatgate skills accept {name}) and no prompt "
                "sees it until then.")

    async def proposals(self) -> list[tuple[str, str]]:
        """(name, who proposed it) of every skill waiting for an admin."""
        found = []
        for document in await self.documents.names(f"{PENDING}/"):
            parts = document.split("/")
            if len(parts) == 4 and parts[3] == "SKILL.md":
                who = await self.documents.read(f"{PENDING}/{parts[2]}/PROPOSED_BY")
                found.append((parts[2], who.strip() if who is not None else "?"))
        return found

    async def settle(self, name: str, accept: bool, *, by: str = "admin") -> str:
        """Accept a proposal (it becomes the skill) or reject it."""
        folder = f"{PENDING}/{self._dir(name).split('/')[1]}"
        text = await self.documents.read(f"{folder}/SKILL.md")
        if text is None:
            raise SkillRefused(f"no proposed skill {name!r}")
        if accept:
            proposed = parse(text, f"{folder}/SKILL.md")
            async with self._lock:
                await asyncio.to_thread(check, name, proposed.description, proposed.body)
                current = await self.documents.read(f"{self._dir(name)}/SKILL.md")
                await self._write(name, proposed.description, proposed.body, by, expected=current)
        await self.documents.delete_all(folder)
        return f"{'Accepted' if accept else 'Rejected'} the proposed skill {name}."

    # -- helpers ---------------------------------------------------------------------------

    async def _existing(self, name: str) -> Skill:
        return (await self._existing_text(name))[0]

    async def _existing_text(self, name: str) -> tuple[Skill, str]:
        document = f"{self._dir(name)}/SKILL.md"
        text = await self.documents.read(document)
        if text is None:
            raise SkillRefused(f"no skill {name!r}; create it first")
        return parse(text, document), text

    def _file_name(self, name: str, file: str) -> str:
        rel = PurePosixPath(file)
        if rel.is_absolute() or ".." in rel.parts or len(rel.parts) < 2 or rel.parts[0] not in FILE_DIRS:
            raise SkillRefused(f"file must be a relative path under {', '.join(FILE_DIRS)}/, e.g. scripts/run.sh")
        return "/".join([self._dir(name), *rel.parts])

    async def _write(self, name: str, description: str, body: str, provenance: str, *, expected: str | None) -> None:
        """SKILL.md written, unless another writer (another instance) changed it since it read `expected`
        (None: there was none): then refused, and nothing is written."""
        def replace(old: str | None) -> str:
            if old != expected:
                raise SkillRefused(f"skill {name!r} was changed meanwhile (elsewhere); read it again and retry")
            return render(name, description, body)

        await self.documents.update(f"{self._dir(name)}/SKILL.md", replace)
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
