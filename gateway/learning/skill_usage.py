"""Skills' provenance and usage in the database (the `agent.skills.SkillUsage` port)."""

from __future__ import annotations

from typing import Any

from gateway.storage import Store


class SkillUsage:
    def __init__(self, store: Store) -> None:
        self.store = store

    async def wrote(self, name: str, provenance: str) -> None:
        """A write by `provenance`; the first writer stays the skill's provenance."""
        await self.store.learning.skill_written(name, provenance)

    async def viewed(self, name: str) -> None:
        await self.store.learning.skill_viewed(name)

    async def state(self, name: str, state: str) -> None:
        await self.store.learning.set_skill_state(name, state)

    async def pin(self, name: str, pinned: bool) -> None:
        await self.store.learning.pin_skill(name, pinned)

    async def meta(self) -> dict[str, dict[str, Any]]:
        return await self.store.learning.skills()
