"""The curator's optional LLM pass (`curator.consolidate`): merge overlapping machine-written skills.

An agent run with the skill tools only (no memory, no terminal), over a library view that lets it
change just the skills the curator may touch — those the agent or a review wrote, not pinned, not
named by a scheduled job — plus the ones it creates in this pass. Anything else is refused by code.
Archiving is its only way to retire a skill, so a merge is always restorable (and the curator takes
its snapshot before the pass).
"""

from __future__ import annotations

from typing import Awaitable, Callable

from agent import usage as usage_scope
from agent.tools.learning import skill_tools
from agent.loop import Agent
from agent.skills import SkillLibrary, SkillRefused
from agent.tools import ToolContext, ToolRegistry

CONSOLIDATE_IDENTITY = """You keep a library of skills (written procedures) tidy. Look for skills that \
overlap — the same procedure written twice, or one that is a special case of another — and merge them: \
create one clear skill (or patch the best existing one) that keeps every step that still matters, then \
archive the ones it replaces. Do not invent steps, do not merge skills that only look alike, and leave \
alone anything that does not overlap. When nothing overlaps, change nothing. Finish with one line \
saying what you merged, or "nothing to merge"."""

Consolidator = Callable[[list[str]], Awaitable[str]]


class LimitedSkills(SkillLibrary):
    """The library, but writes only to `allowed` names (and to skills created through this view)."""

    def __init__(self, base: SkillLibrary, allowed: set[str]) -> None:
        super().__init__(base.documents, base.ledger)
        self.allowed = set(allowed)

    def _guard(self, name: str) -> None:
        if name not in self.allowed:
            raise SkillRefused(f"{name!r} is not one of the skills this pass may change")

    async def create(self, name: str, description: str, body: str, *, provenance: str) -> str:
        result = await super().create(name, description, body, provenance=provenance)
        self.allowed.add(name)
        return result

    async def edit(self, name: str, **kwargs: object) -> str:  # type: ignore[override]
        self._guard(name)
        return await super().edit(name, **kwargs)  # type: ignore[arg-type]

    async def patch(self, name: str, old_text: str, new_text: str, *, provenance: str) -> str:
        self._guard(name)
        return await super().patch(name, old_text, new_text, provenance=provenance)

    async def write_file(self, name: str, file: str, content: str, *, provenance: str) -> str:
        self._guard(name)
        return await super().write_file(name, file, content, provenance=provenance)

    async def remove_file(self, name: str, file: str, *, provenance: str) -> str:
        self._guard(name)
        return await super().remove_file(name, file, provenance=provenance)

    async def archive(self, name: str) -> str:
        self._guard(name)
        return await super().archive(name)


def consolidator(agent: Agent, base: SkillLibrary) -> Consolidator:
    async def consolidate(names: list[str]) -> str:
        limited = LimitedSkills(base, set(names))
        tools = ToolRegistry(skill_tools(limited)).scope()
        request = ("Skills you may merge or archive: " + ", ".join(sorted(names)) +
                   ". Read them with skill_view, merge the ones that overlap, then answer with one line.")
        usage_scope.serving("curator")
        try:
            result = await agent.run_turn([], request, tools, ToolContext())
        finally:
            base.changed()
        return result.text.strip().splitlines()[0] if result.text.strip() else "(no answer)"

    return consolidate
