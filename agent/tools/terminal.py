"""The `terminal` tool: each command is classified first (`agent.safety.classifier`). Hardline commands
never run; dangerous ones wait for a person's approval through the `ApprovalPort`. Without a
sandbox (or outside it) a command also asks unless it is on the short read-only list
(`agent.safety.readonly_commands`) — or, where the operator opted into `unconfined="classifier"`, unless
the classifier calls it safe and its paths can be checked before it runs; either way one that reaches
chatgate's own state or runs code from the workspace asks, showing that code. All of that is read before
any grant is looked at: a person's "allow for this session" or "always allow" covers the command only
while its words lead where they led when it was shown (`agent.safety.reach`), and never one that
reaches chatgate's state — that asks each time. No consent port means no consent."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any, Sequence

from agent.safety.reach import (glob_matches, out_through_a_link, path_words, reach_digest, reading,
                                through_a_process, touches_protected)
from agent.safety.readonly_commands import not_read_only
from agent.safety.workspace_code import files_run, fingerprint, show_code
from agent.safety.workspace_gate import gate_for
from agent.tools.contract import ApprovalRequest, ToolContext, ToolHandler
from agent.tools.shell import Shell

MAX_TIMEOUT = 600.0  # seconds; a model asking for more gets this
UNCONFINED = ("allowlist", "classifier")  # what decides without a sandbox: the read-only list, or the classifier
MAX_UNKNOWN = 3  # reasons shown of why a command's paths cannot be checked


def _as_timeout(value: Any, default: float) -> float | str:
    if value is None:
        return default
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        return f"error: timeout must be a number of seconds, not {value!r}"
    return min(max(seconds, 1.0), max(MAX_TIMEOUT, default))


def _unconfined(command: str, workspace: Path, protected: tuple[Path, ...], allowlist: bool,
                interpreted: tuple[str, ...] = ()) -> tuple[str | None, list[Path], str | None, str | None]:
    """What running `command` with chatgate's own rights would reach: a protected folder, workspace
    code, and why it is not on the read-only list (with `allowlist`) or, without it, why its paths cannot
    be checked before it runs (`interpreted`: how it hands code to an interpreter, as the classifier found).
    Reads the disk: run in a thread."""
    code = [f"code handed to an interpreter ({', '.join(interpreted[:2])}: the paths it builds are known only "
            "when it runs)"] if interpreted else []
    unknown = None if allowlist else "; ".join([
        *filter(None, [through_a_process(command, workspace), out_through_a_link(command, workspace)]), *code,
        *reading(command).unknown][:MAX_UNKNOWN]) or None
    return (touches_protected(command, workspace, protected), files_run(command, workspace),
            not_read_only(command, workspace, protected) if allowlist else None, unknown)


def _snapshot(command: str, workspace: Path) -> tuple[tuple[str, object], ...]:
    """What a person is shown and asked about: the code the command runs, and where each path-like
    word of it leads (links followed) with what is there — each file's identity and content — and what
    each glob matches. Reads the disk: run in a thread."""
    workspace = Path(os.path.realpath(workspace))
    words = reading(command)
    seen: dict[str, object] = {str(p): fingerprint(p, workspace) for p in files_run(command, workspace)}
    seen.update((f"{pattern} (what it matches)", found) for pattern, found in glob_matches(words, workspace))
    for word in path_words(command, words):
        try:
            real = Path(os.path.realpath(os.path.join(workspace, word)))
        except (OSError, ValueError):
            continue
        seen.setdefault(word, (str(real), fingerprint(real, workspace) if real.is_relative_to(workspace) else None))
    return tuple(seen.items())


def _changed(before: tuple[tuple[str, object], ...], now: tuple[tuple[str, object], ...]) -> str:
    old, new = dict(before), dict(now)
    names = [n for n in dict.fromkeys([*old, *new]) if old.get(n) != new.get(n)]
    return ", ".join(os.path.basename(n.rstrip("/")) or n for n in names[:5]) or "the files it runs"


def _unconfined_reasons(code: Sequence[Path], state: Any, outside: bool, judged: tuple[str, ...],
                        unlisted: str, unknown: str) -> tuple[str, ...]:
    """Why a command with no sandbox around it must ask (none: it runs unasked). `judged`: the
    classifier's reasons when it did not call the command safe, else ()."""
    return (*([f"runs code from the workspace ({', '.join(p.name for p in code)}) with no sandbox around it"]
              if code else []),
            *([f"reaches {state} (chatgate's own state) with no sandbox around it"] if state else []),
            *(["runs OUTSIDE the sandbox: with chatgate's own access to files, secrets and the network"]
              if outside else []),
            *judged,
            *([f"not on the read-only list ({unlisted}): with no sandbox it would run with chatgate's own rights"]
              if unlisted else []),
            *([f"its paths cannot be checked before it runs ({unknown}): with no sandbox it would run with "
               "chatgate's own rights"] if unknown else []))


async def _ask(shell: Shell, ctx: ToolContext, subject: str, reasons: tuple[str, ...], confinement: str, *,
               reach: str = "", each_time: bool = False) -> tuple[bool, str]:
    """(True, the outcome's words) when a person said yes (or a grant of theirs covers it); else (False,
    what to tell the model)."""
    if ctx.approvals is None:
        return False, (f"refused: this command ({'; '.join(reasons)}) needs a person's approval "
                       "and nobody can approve here. The command was NOT run.")
    outcome = await ctx.approvals.request(ctx, ApprovalRequest("command", shell.redact(subject), reasons,
                                                               confinement, reach, each_time))
    if not outcome.approved:
        return False, f"{outcome.message}\nThe command was NOT run."
    return True, outcome.message


def terminal_tool(shell: Shell, protected: tuple[Path, ...] = (), unconfined: str = "allowlist") -> ToolHandler:
    """The `terminal` handler: classify, decide whether a person must say yes, run.

    `unconfined`: what lets a command run unasked without a sandbox — "allowlist" (only the
    read-only list, `agent.safety.readonly_commands`) or "classifier" (whatever the classifier calls safe).
    A command run unconfined holds the workspace still (`agent.safety.workspace_gate`) while it is checked
    and shown, and from the check after the person's yes to its end (one let through unasked: from its
    check to its end, so no command queued meanwhile runs between them); what changed in between (the
    code it runs, where its paths lead) makes it refused, not run.
    """
    if unconfined not in UNCONFINED:
        raise ValueError(f"unconfined must be one of {', '.join(UNCONFINED)}, not {unconfined!r}")

    async def terminal(ctx: ToolContext, command: str, timeout: int | None = None,
                       outside_sandbox: bool = False) -> str:
        if not isinstance(command, str) or not command.strip():
            return "error: command must be a non-empty string"
        if "\0" in command:
            return "error: command must not contain NUL characters (bash cannot pass them on)"
        seconds = _as_timeout(timeout, shell.timeout)
        if isinstance(seconds, str):
            return seconds
        from agent.safety.classifier import classify  # its tables load at the first command, not at start

        verdict = classify(command)
        findings = tuple(shell.redact(r) for r in verdict.reasons)  # reasons quote the command
        if verdict.verdict == "hardline":
            return (f"refused: this command is never run here ({'; '.join(findings or ('no reason given',))}). "
                    "The command was NOT run. Do not try to get around this; tell the user instead.")
        sandboxed = await shell.sandbox.ready()
        outside = bool(outside_sandbox) and sandboxed
        if not sandboxed and shell.sandbox.required:
            return (f"refused: commands run only in the sandbox, and it does not work here "
                    f"({shell.sandbox.describe()}). The command was NOT run; tell the user.")
        gate = gate_for(shell.workspace)
        if sandboxed and not outside:  # confined: only the classifier's findings ask
            said = ""
            if verdict.verdict != "safe":
                approved, said = await _ask(shell, ctx, command, findings or ("no reason given",), "sandbox")
                if not approved:
                    return said
                said += "\n"
            async with gate.shared():
                return f"{said}{await shell.run(command, seconds)}"
        async with gate.exclusive():  # unconfined: nothing of ours changes the workspace while it is judged
            state, code, unlisted, unknown = await asyncio.to_thread(_unconfined, command, shell.workspace, protected,
                                                                     unconfined == "allowlist", verdict.interpreted)
            judged = (findings or ("no reason given",)) if verdict.verdict != "safe" else ()
            reasons = _unconfined_reasons(code, state, outside, judged,
                                          shell.redact(unlisted) if unlisted else "",
                                          shell.redact(unknown) if unknown else "")
            if not reasons:  # plainly read-only (or, opted into, safe to the classifier): it runs before the
                return await shell.run(command, seconds)  # gate is given up — what was checked is what it opens
            subject = command
            if code:  # the code a script holds is what runs, not the harmless-looking command line
                subject = f"{command}\n\n{await asyncio.to_thread(show_code, code, shell.workspace)}"
            shown = await asyncio.to_thread(_snapshot, command, shell.workspace)
            reach = await asyncio.to_thread(reach_digest, command, shell.workspace, code)
        # A grant covers only this command leading where it leads now; one that reaches the state, none.
        approved, said = await _ask(shell, ctx, subject, reasons, "unconfined", reach=reach, each_time=bool(state))
        if not approved:
            return said
        async with gate.exclusive():  # what runs is what was shown: checked again, held to the end
            now = await asyncio.to_thread(_snapshot, command, shell.workspace)
            if now != shown:
                return (f"refused: what this command runs or reaches changed after the person was asked "
                        f"({shell.redact(_changed(shown, now))}). The command was NOT run; ask again if it is "
                        "still needed.")
            return f"{said}\n{await shell.run(command, seconds, confined=not outside)}"

    return terminal
