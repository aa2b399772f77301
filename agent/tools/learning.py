"""The tools the agent learns with: `memory`, `skills_list`, `skill_view`, `skill_manage`.

They form the toolset "learning", the only tools a background review may use. Writes carry
the provenance in `ctx.provenance` ("agent" in a conversation, "review" in a review).
A run on the words of several people (`ctx.several_people`) keeps no notes about one person.
"""

from __future__ import annotations

from typing import Any, Callable

from agent.memory import Memory, MemoryRefused
from agent.skills import SkillLibrary, SkillRefused
from agent.tools.contract import Tool, ToolContext

TOOLSET = "learning"
SKILL_ACTIONS = ("create", "patch", "edit", "archive", "write_file", "remove_file")


Untrusted = Callable[[str, str], bool]  # (platform, user) → their writes wait for an admin


def learning_tools(memory: Memory, skills: SkillLibrary, untrusted: Untrusted = lambda platform, user: False
                   ) -> list[Tool]:
    """The learning toolset. What is shared — the notes every conversation sees, the skills — is
    written only from conversations of people `untrusted` does not name: from theirs a shared note
    or a skill waits for an admin (`chatgate memory accept`, `chatgate skills accept`). Notes about the
    person themselves (`target: user`) reach only their own prompts and are written as usual."""
    return [memory_tool(memory, untrusted), *skill_tools(skills, untrusted)]


def _untrusted(ctx: ToolContext, untrusted: Untrusted) -> bool:
    return bool(ctx.platform) and untrusted(ctx.platform, ctx.user_id)


def memory_tool(memory: Memory, untrusted: Untrusted = lambda platform, user: False) -> Tool:
    async def handle(ctx: ToolContext, action: str, target: str, text: str = "", old_text: str = "") -> str:
        try:
            if target == "user" and ctx.several_people:
                return ("error: several people spoke in this conversation, so no notes about one of them are kept "
                        "from it; such notes are kept in a conversation with that person alone")
            if target == "memory" and _untrusted(ctx, untrusted):
                if action != "add":
                    return ("error: shared notes change only in conversations of an admin; add a note instead "
                            "and an admin will review it")
                return await memory.propose(text, ctx.platform, ctx.user_id)
            return await memory.change(action, target, text=text, old_text=old_text,
                                       platform=ctx.platform, user_id=ctx.user_id)
        except MemoryRefused as exc:
            return f"error: {exc}"

    return Tool("memory",
                "Keep short notes across sessions. target 'memory': your own notes for every conversation; "
                "'user': what you know about the person you are talking to. add a new entry, replace or remove "
                "the entry containing old_text. Space is small: keep entries short and consolidate.",
                {"type": "object", "required": ["action", "target"],
                 "properties": {"action": {"type": "string", "enum": ["add", "replace", "remove"]},
                                "target": {"type": "string", "enum": ["memory", "user"]},
                                "text": {"type": "string", "description": "the entry to keep (add, replace)"},
                                "old_text": {"type": "string", "description": "a unique part of the entry to change"}}},
                handle, TOOLSET, side_effects=True)


def skill_tools(skills: SkillLibrary, untrusted: Untrusted = lambda platform, user: False) -> list[Tool]:
    async def skills_list(ctx: ToolContext) -> str:
        found = await skills.all()
        if not found:
            return "No skills yet."
        return "\n".join(f"- {s.name}: {s.description}" for s in found)

    async def skill_view(ctx: ToolContext, name: str, file: str | None = None) -> str:
        try:
            return await skills.view(name, file)
        except SkillRefused as exc:
            return f"error: {exc}"

    async def skill_manage(ctx: ToolContext, action: str, name: str, description: str | None = None,
                           body: str | None = None, old_text: str = "", new_text: str = "",
                           file: str = "", content: str = "") -> str:
        provenance = ctx.provenance
        try:
            if _untrusted(ctx, untrusted):  # shared by every conversation: an admin accepts it first
                return await skills.propose(action, name, description=description, body=body, old_text=old_text,
                                            new_text=new_text, proposer=f"{ctx.platform}:{ctx.user_id}")
            if action == "create":
                return await skills.create(name, description or "", body or "", provenance=provenance)
            if action == "edit":
                return await skills.edit(name, description=description, body=body, provenance=provenance)
            if action == "patch":
                return await skills.patch(name, old_text, new_text, provenance=provenance)
            if action == "archive":
                return await skills.archive(name)
            if action == "write_file":
                return await skills.write_file(name, file, content, provenance=provenance)
            if action == "remove_file":
                return await skills.remove_file(name, file, provenance=provenance)
        except SkillRefused as exc:
            return f"error: {exc}"
        return f"error: action must be one of {', '.join(SKILL_ACTIONS)}"

    text: dict[str, Any] = {"type": "string"}
    return [
        Tool("skills_list", "List your skills (procedures you wrote before) with their descriptions.",
             {"type": "object", "properties": {}}, skills_list, TOOLSET),
        Tool("skill_view", "Read a skill's procedure, or one of its files (references/, templates/, scripts/).",
             {"type": "object", "required": ["name"],
              "properties": {"name": text, "file": {**text, "description": "e.g. scripts/check.sh"}}},
             skill_view, TOOLSET),
        Tool("skill_manage",
             "Write down a reusable procedure, or improve one. create (name, description, body); patch "
             "(old_text → new_text in the body; prefer this to improve a skill); edit (new description and/or "
             "body); archive (set aside, restorable); write_file / remove_file (file under references/, "
             "templates/ or scripts/, with content). Names: lower case, digits, '.', '_', '-'.",
             {"type": "object", "required": ["action", "name"],
              "properties": {"action": {"type": "string", "enum": list(SKILL_ACTIONS)}, "name": text,
                             "description": text, "body": text, "old_text": text, "new_text": text,
                             "file": text, "content": text}},
             skill_manage, TOOLSET, side_effects=True),
    ]
