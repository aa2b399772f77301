"""The tools that touch the machine: a shell (`agent.tools.terminal`) and the file tools
(`agent.tools.files`), in one workspace directory.

Secrets stay out of what the model sees: the command's environment is a copy of ours without
credential-looking variables, and every tool result has the given secret values replaced by
``***`` (`agent.tools.redaction`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Sequence

from agent.safety.sandbox import Sandbox
from agent.tools.contract import Tool, ToolContext, ToolHandler
from agent.tools.files import (MAX_READ_BYTES, Files, patch_file_tool, read_file_tool, send_file_tool,
                               write_file_tool)
from agent.tools.redaction import Redactor
from agent.tools.shell import Shell
from agent.tools.terminal import MAX_TIMEOUT, terminal_tool

__all__ = ["MAX_READ_BYTES", "TOOLSET", "system_tools"]

TOOLSET = "system"

def _redacting(handler: ToolHandler, redact: Redactor) -> ToolHandler:
    async def wrapper(ctx: ToolContext, **arguments: Any) -> str:
        return redact(await handler(ctx, **arguments))

    wrapper.__name__ = getattr(handler, "__name__", "tool")
    return wrapper


def system_tools(workspace: Path, *, secrets: Sequence[str] = (), timeout: float = 60.0,
                 output_limit: int = 16_000, sandbox: Sandbox | None = None,
                 protected: Sequence[Path] = (), unconfined: str = "allowlist") -> list[Tool]:
    """The "system" toolset: `terminal`, `read_file`, `write_file`, `patch_file`, `send_file`, rooted at `workspace`.

    `secrets` are values (API keys, bot tokens) that must never reach the model: environment
    variables containing one are not passed to commands, and every result has them as ``***``.
    Values shorter than MIN_SECRET_LEN characters are ignored. Commands run in `sandbox`
    (default: bubblewrap where it works, see `agent.safety.sandbox`); without one, a command that names
    a `protected` folder (chatgate's home), or leaves the workspace with `..` into it, asks first;
    so does any other command not on the read-only list (`agent.safety.readonly_commands`), unless
    `unconfined` is "classifier" (then whatever the classifier calls safe runs unasked).
    """
    workspace = Path(workspace).expanduser().absolute()
    redact = Redactor(secrets)
    sandbox = sandbox if sandbox is not None else Sandbox()
    shell = Shell(workspace, redact, tuple(secrets), float(timeout), int(output_limit), sandbox)
    protected = tuple(Path(os.path.realpath(p)) for p in protected)
    files = Files(workspace, int(output_limit), redact, protected)
    tools = [_terminal(shell, workspace, protected, unconfined, timeout=timeout, output_limit=output_limit),
             *_file_tools(files)]
    return [Tool(t.name, t.description, t.parameters, _redacting(t.handler, redact), t.toolset, t.side_effects)
            for t in tools]


def _terminal(shell: Shell, workspace: Path, protected: Sequence[Path], unconfined: str, *, timeout: float,
              output_limit: int) -> Tool:
    cap = int(max(MAX_TIMEOUT, timeout))
    return Tool("terminal",
                f"Run a bash command in the workspace ({workspace}) and get back 'exit code N' followed by its "
                f"combined stdout and stderr. No input can be typed, so interactive programs will not work. "
                f"Stops after {timeout:g} s unless you pass timeout (max {cap} s); on timeout the result starts "
                f"with 'timed out'. Processes the command leaves in the background are stopped when it ends. "
                f"Output over {output_limit} characters is cut in the middle. Dangerous commands wait for a "
                f"person's approval (if refused, the result says the command was NOT run); some are never run. "
                f"Commands run in a sandbox when one is available: only the workspace can be written, there is "
                f"no network and no access to the user's home; if a command needs those, run it again with "
                f"outside_sandbox=true, which always asks a person first."
                + (" Where there is no sandbox, only simple read-only commands on workspace files (ls, cat, head, "
                   "tail, wc, grep, find, sort, git status/diff/log) run without asking." if unconfined == "allowlist"
                   else ""),
                {"type": "object", "required": ["command"],
                 "properties": {
                     "command": {"type": "string", "description": "the command line, run by bash"},
                     "timeout": {"type": "integer", "minimum": 1, "maximum": cap,
                                 "description": f"seconds before the command is killed (default {timeout:g})"},
                     "outside_sandbox": {"type": "boolean",
                                         "description": "run it outside the sandbox (asks a person first)"}}},
                terminal_tool(shell, protected, unconfined), TOOLSET, side_effects=True)


def _file_tools(files: Files) -> list[Tool]:
    return [
        Tool("read_file",
             "Read a text file, as numbered lines ('     1<TAB>text'). Paths are relative to the workspace; "
             "a path outside it needs a person's approval. Long files come in pages: the result then ends "
             "with the offset to continue from. Binary files and files over 2 MB give an error.",
             {"type": "object", "required": ["path"],
              "properties": {
                  "path": {"type": "string", "description": "file path, relative to the workspace"},
                  "offset": {"type": "integer", "minimum": 0, "description": "lines to skip (default 0)"},
                  "limit": {"type": "integer", "minimum": 1, "description": "most lines to return (default 2000)"}}},
             read_file_tool(files), TOOLSET),
        Tool("write_file",
             "Write a whole text file (UTF-8), replacing it if it exists and creating missing folders. "
             "The write is atomic. Paths are relative to the workspace; a path outside it needs a person's "
             "approval. To change part of a file, use patch_file instead.",
             {"type": "object", "required": ["path", "content"],
              "properties": {
                  "path": {"type": "string", "description": "file path, relative to the workspace"},
                  "content": {"type": "string", "description": "the complete new content of the file"}}},
             write_file_tool(files), TOOLSET, side_effects=True),
        Tool("patch_file",
             "Replace exact text in a file. `old` must match the file exactly (spaces, indentation, line "
             "breaks); include enough surrounding lines that it occurs only once. If it is not found, or "
             "found more often than `count` allows, nothing changes and you get an error. count=0 replaces "
             "every occurrence. Paths are relative to the workspace; outside it needs a person's approval.",
             {"type": "object", "required": ["path", "old", "new"],
              "properties": {
                  "path": {"type": "string", "description": "file path, relative to the workspace"},
                  "old": {"type": "string", "description": "the exact text to replace"},
                  "new": {"type": "string", "description": "the text to put in its place"},
                  "count": {"type": "integer", "minimum": 0,
                            "description": "most occurrences allowed (default 1); 0 = replace all"}}},
             patch_file_tool(files), TOOLSET, side_effects=True),
        Tool("send_file",
             "Send a file to the person you are talking to (a report, an image, an archive you made); it "
             "arrives right after your reply, as it is when you call this (a copy is taken now). At most 50 MB "
             "and 10 files per reply; a regular file only, not through a symbolic link. Paths are relative to "
             "the workspace; a file outside it needs a person's approval.",
             {"type": "object", "required": ["path"],
              "properties": {"path": {"type": "string", "description": "file path, relative to the workspace"}}},
             send_file_tool(files), TOOLSET)
    ]
