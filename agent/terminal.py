"""The `terminal` tool: each command is classified first (`agent.command_guard`). Hardline commands
never run; dangerous ones wait for a person's approval through the `ApprovalPort`; without a
sandbox (or outside it) a command that reaches chatgate's own state or runs code from the
workspace asks too, showing that code. No consent port means no consent."""

from __future__ import annotations

import asyncio
import os
import re
from pathlib import Path
from typing import Any

from agent.shell import Shell
from agent.tools import ApprovalRequest, ToolContext, ToolHandler
from agent.workspace_code import files_run, show_code

MAX_TIMEOUT = 600.0  # seconds; a model asking for more gets this
_UP_AND_OUT = re.compile(r"(^|[\s'\"=:<>|;&(])\.\.(/|$|[\s'\";&|)])")  # a path that starts by leaving the workspace


def touches_protected(command: str, workspace: Path, protected: tuple[Path, ...]) -> str | None:
    """A protected folder the command names, by path or by `..` out of the workspace."""
    workspace = Path(os.path.realpath(workspace))
    for folder in protected:
        for named in re.findall(re.escape(str(folder)) + r"[^\s'\";&|)]*", command):
            if not Path(os.path.normpath(named)).is_relative_to(workspace):  # (the workspace is fine)
                return str(folder)
        if workspace.is_relative_to(folder) and _UP_AND_OUT.search(command):
            return f"{folder} (through ..)"
    return None


def _as_timeout(value: Any, default: float) -> float | str:
    if value is None:
        return default
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        return f"error: timeout must be a number of seconds, not {value!r}"
    return min(max(seconds, 1.0), max(MAX_TIMEOUT, default))


def terminal_tool(shell: Shell, protected: tuple[Path, ...] = ()) -> ToolHandler:
    """The `terminal` handler: classify, decide whether a person must say yes, run."""

    async def terminal(ctx: ToolContext, command: str, timeout: int | None = None,
                       outside_sandbox: bool = False) -> str:
        if not isinstance(command, str) or not command.strip():
            return "error: command must be a non-empty string"
        seconds = _as_timeout(timeout, shell.timeout)
        if isinstance(seconds, str):
            return seconds
        from agent.command_guard import classify  # its tables load at the first command, not at start

        verdict = classify(command)
        reasons = tuple(shell.redact(r) for r in verdict.reasons) or ("no reason given",)  # reasons quote the command
        if verdict.verdict == "hardline":
            return (f"refused: this command is never run here ({'; '.join(reasons)}). "
                    "The command was NOT run. Do not try to get around this; tell the user instead.")
        sandboxed = await shell.sandbox.ready()
        outside = bool(outside_sandbox) and sandboxed
        if not sandboxed and shell.sandbox.required:
            return (f"refused: commands run only in the sandbox, and it does not work here "
                    f"({shell.sandbox.describe()}). The command was NOT run; tell the user.")
        if outside:  # whatever the verdict: leaving the sandbox is a person's decision
            reasons = ("runs OUTSIDE the sandbox: with chatgate's own access to files, secrets and the network",
                       *(reasons if verdict.verdict != "safe" else ()))
        subject = command
        state = touches_protected(command, shell.workspace, protected) if not sandboxed or outside else None
        if state:  # unconfined, chatgate's own state (config, database, tokens) is only a path away
            reasons = (f"reaches {state} (chatgate's own state) with no sandbox around it", *reasons)
        code = await asyncio.to_thread(files_run, command, shell.workspace) if not sandboxed or outside else []
        if code:  # unconfined: the code a script holds is what runs, not the harmless-looking command line
            names = ", ".join(p.name for p in code)
            reasons = (f"runs code from the workspace ({names}) with no sandbox around it",
                       *(reasons if verdict.verdict != "safe" or outside else ()))
            subject = f"{command}\n\n{await asyncio.to_thread(show_code, code, shell.workspace)}"
        if verdict.verdict != "safe" or outside or code or state:  # "dangerous", or what the guard adds later: ask
            if ctx.approvals is None:
                return (f"refused: this command ({'; '.join(reasons)}) needs a person's approval "
                        "and nobody can approve here. The command was NOT run.")
            confinement = "sandbox" if sandboxed and not outside else "unconfined"
            outcome = await ctx.approvals.request(ctx, ApprovalRequest("command", shell.redact(subject), reasons,
                                                                       confinement))
            if not outcome.approved:
                return f"{outcome.message}\nThe command was NOT run."
            return f"{outcome.message}\n{await shell.run(command, seconds, confined=not outside)}"
        return await shell.run(command, seconds)

    return terminal

