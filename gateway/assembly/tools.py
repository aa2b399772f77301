"""Building the agent's tools: the built-in ones, the commands it runs (in the sandbox), its notes and skills,
and the subagents it may start (`delegate_task`)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Callable

from agent.delegation import SUBAGENT_IDENTITY, Delegation, Limits
from agent.memory import Memory
from agent.safety.sandbox import Sandbox
from agent.skills import SkillLibrary
from agent.tools import Tool, ToolRegistry
from agent.tools.builtin import BUILTIN_TOOLS
from agent.tools.learning import learning_tools
from agent.tools.system import system_tools
from gateway.learning.documents import documents_of

if TYPE_CHECKING:
    from gateway.agents import Agents
    from gateway.assembly.parts import Ground
    from gateway.config import Config
    from gateway.storage import Store


async def agent_side(g: "Ground", agents: "Agents", *,
                     more: list[Tool]) -> tuple[Sandbox, Memory, SkillLibrary, ToolRegistry]:
    """Where commands run, the notes and skills, and every tool the agent has (`more`: the gateway's own,
    such as managing scheduled jobs)."""
    cfg = g.config
    sandbox = Sandbox(cfg.agent.sandbox.mode, network=cfg.agent.sandbox.network == "on",
                      hidden=[*cfg.private_paths(), Path.home()])
    documents = documents_of(g.store, cfg.home)  # (PostgreSQL: in the database every instance shares)
    memory, skills = Memory(documents), SkillLibrary(documents, g.store.learning)
    tools = ToolRegistry([*BUILTIN_TOOLS, *system_tools(cfg.workspace, secrets=cfg.secrets(),
                                                        timeout=cfg.agent.command_timeout_seconds, sandbox=sandbox,
                                                        protected=cfg.private_paths(),
                                                        unconfined=cfg.agent.sandbox.unconfined),
                          *more, *learning_tools(memory, skills, _untrusted(g)),
                          *await _delegation(cfg, g.store, agents)])
    return sandbox, memory, skills, tools


def _untrusted(g: "Ground") -> Callable[[str, str], bool]:
    """Whose writes to shared notes and skills wait (quarantine)."""
    quarantine, local = g.config.access.untrusted_learning == "quarantine", g.local

    def untrusted(platform: str, user: str) -> bool:
        return quarantine and platform not in local and not g.is_admin(platform, user)
    return untrusted


async def _delegation(cfg: "Config", store: "Store", agents: "Agents") -> list[Tool]:
    """`delegate_task`, when there is a model and `delegation.enabled`."""
    settings = cfg.delegation
    children = agents.on(agents.llm, SUBAGENT_IDENTITY, settings.max_iterations, compress=True) \
        if settings.enabled else None
    if children is None:
        return []
    await store.subagents.interrupted()  # children an earlier process left running were cut off with it
    limits = Limits(settings.max_concurrent, settings.max_depth, settings.max_children_per_turn)
    return [Delegation(children, store.subagents, limits).tool()]
