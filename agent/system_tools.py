"""The tools that touch the machine: a shell, and reading, writing and patching files.

Everything runs in one workspace directory. The shell asks `agent.command_guard` about each
command first: hardline commands are never run, dangerous ones wait for a person's approval
through the `ApprovalPort`, safe ones run at once. A file path that leads out of the workspace
(after `..` and symlinks are resolved) also needs approval. No consent port means no consent.

Secrets stay out of what the model sees: the command's environment is a copy of ours without
credential-looking variables, and every tool result has the given secret values replaced by
``***``.
"""

from __future__ import annotations

import asyncio
import codecs
import difflib
import os
import re
import shutil
import signal
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from agent.beneath import Beneath, Refused, TooLarge
from agent.sandbox import Sandbox
from agent.tools import ApprovalRequest, Tool, ToolContext, ToolHandler
from agent.workspace_code import files_run, show_code

TOOLSET = "system"
MAX_TIMEOUT = 600.0  # seconds; a model asking for more gets this
MAX_READ_BYTES = 2_000_000  # read_file and patch_file refuse larger files
MAX_LINE_CHARS = 2_000  # read_file shortens longer lines
MIN_SECRET_LEN = 8  # shorter values are dummies ("x", "ollama") whose redaction would blank ordinary words
_UP_AND_OUT = re.compile(r"(^|[\s'\"=:<>|;&(])\.\.(/|$|[\s'\";&|)])")  # a path that starts by leaving the workspace
KILL_GRACE = 2.0  # seconds to wait for the pipe to close once the process group is killed

_SECRET_NAME = re.compile(r"TOKEN|SECRET|PASSWORD|PASSWD|API_KEY|APIKEY|PRIVATE_KEY|CREDENTIAL", re.IGNORECASE)
_SECRET_PREFIXES = ("CHATGATE_", "OPENAI_", "TELEGRAM_", "DISCORD_", "SLACK_", "ANTHROPIC_", "OPENROUTER_")


# --- secrets -------------------------------------------------------------------------------------

class _Redactor:
    def __init__(self, secrets: Sequence[str]) -> None:
        # longest first, so a secret that contains another is replaced whole
        self.secrets = tuple(sorted({s for s in secrets if s and len(s) >= MIN_SECRET_LEN}, key=len, reverse=True))

    def __call__(self, text: str) -> str:
        for secret in self.secrets:
            if secret in text:
                text = text.replace(secret, "***")
        return text

    def partial_suffix(self, text: str) -> int:
        """Length of the longest end of `text` that could be the start of a secret cut off there."""
        best = 0
        for s in self.secrets:
            for k in range(min(len(s) - 1, len(text)), best, -1):
                if text.endswith(s[:k]):
                    best = k
                    break
        return best

    def partial_prefix(self, text: str) -> int:
        """Length of the longest start of `text` that could be the end of a secret cut off there."""
        best = 0
        for s in self.secrets:
            for k in range(min(len(s) - 1, len(text)), best, -1):
                if text.startswith(s[-k:]):
                    best = k
                    break
        return best


def command_env(secrets: Sequence[str] = ()) -> dict[str, str]:
    """A copy of os.environ without chatgate's credentials, for commands the agent runs."""
    values = _Redactor(secrets).secrets
    return {name: value for name, value in os.environ.items()
            if not _SECRET_NAME.search(name)
            and not name.upper().startswith(_SECRET_PREFIXES)
            and not any(s in value for s in values)}


# --- the shell -----------------------------------------------------------------------------------

class _Output:
    """Combined stdout+stderr, kept as head and tail so a flood of output costs bounded memory."""

    def __init__(self, limit: int) -> None:
        self.limit = max(limit, 200)
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.head = ""
        self.tail = ""
        self.total = 0  # characters decoded so far

    def feed(self, data: bytes, final: bool = False) -> None:
        text = self._decoder.decode(data, final)
        self.total += len(text)
        room = self.limit - len(self.head)
        if room > 0:
            self.head += text[:room]
            text = text[room:]
        if text:
            self.tail = (self.tail + text)[-self.limit:]

    def render(self, redact: _Redactor) -> str:
        self.feed(b"", final=True)
        dropped = self.total - len(self.head) - len(self.tail)
        if dropped == 0:
            text = redact(self.head + self.tail)
            if len(text) <= self.limit:
                return text
            head, tail = text, text
        else:
            # a secret cut in two by the dropped middle can't be redacted: drop its pieces as well
            cut_head = redact.partial_suffix(self.head)
            cut_tail = redact.partial_prefix(self.tail)
            head = redact(self.head[:len(self.head) - cut_head])
            tail = redact(self.tail[cut_tail:])
        keep_head = self.limit // 2
        keep_tail = self.limit - keep_head
        shown_head, shown_tail = head[:keep_head], tail[-keep_tail:]
        if dropped == 0:
            cut = len(head) - len(shown_head) - len(shown_tail)
        else:
            cut = self.total - len(shown_head) - len(shown_tail)
        return f"{shown_head}\n[… {cut} characters cut …]\n{shown_tail}"


class _Run(asyncio.SubprocessProtocol):
    """Feeds output into an `_Output`; tells when the shell exited and when the pipe closed."""

    def __init__(self, output: _Output) -> None:
        loop = asyncio.get_running_loop()
        self.output = output
        self.exited: asyncio.Future[None] = loop.create_future()
        self.closed: asyncio.Future[None] = loop.create_future()

    def pipe_data_received(self, fd: int, data: bytes) -> None:
        self.output.feed(data)

    def pipe_connection_lost(self, fd: int, exc: Exception | None) -> None:
        if fd == 1 and not self.closed.done():
            self.closed.set_result(None)

    def process_exited(self) -> None:
        if not self.exited.done():
            self.exited.set_result(None)


def _shell_path() -> str:
    if os.path.exists("/bin/bash"):
        return "/bin/bash"
    return shutil.which("bash") or "/bin/sh"


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _kill_started(start: asyncio.Future[Any]) -> None:
    if not start.cancelled() and start.exception() is None:
        transport, _ = start.result()
        _kill_group(transport.get_pid())
        transport.close()


async def _wait(future: asyncio.Future[None], seconds: float) -> bool:
    try:
        async with asyncio.timeout(seconds):  # (not wait_for: on 3.11 it can swallow a /stop's cancel)
            await asyncio.shield(future)
        return True
    except TimeoutError:
        return False


@dataclass(frozen=True, slots=True)
class _Shell:
    workspace: Path
    redact: _Redactor
    secrets: tuple[str, ...]
    timeout: float
    output_limit: int
    sandbox: Sandbox
    protected: tuple[Path, ...] = ()  # folders a command must not reach unasked when unconfined

    def touches_protected(self, command: str) -> str | None:
        """A protected folder the command names, by path or by `..` out of the workspace."""
        workspace = Path(os.path.realpath(self.workspace))
        for folder in self.protected:
            for named in re.findall(re.escape(str(folder)) + r"[^\s'\";&|)]*", command):
                if not Path(os.path.normpath(named)).is_relative_to(workspace):  # (the workspace is fine)
                    return str(folder)
            if workspace.is_relative_to(folder) and _UP_AND_OUT.search(command):
                return f"{folder} (through ..)"
        return None

    async def run(self, command: str, timeout: float, *, confined: bool = True) -> str:
        """Run `command` in its own session; whatever is left of it when it ends or times out is killed.

        The pipe is read until the process group is gone (background children hold it open), so
        once the shell exits its whole group is killed: nothing a command starts outlives it.
        """
        self.workspace.mkdir(parents=True, exist_ok=True)
        argv = [_shell_path(), "-c", command]
        if confined and await self.sandbox.ready():
            argv = self.sandbox.wrap(argv, self.workspace)
        output = _Output(self.output_limit)
        loop = asyncio.get_running_loop()
        start = asyncio.ensure_future(loop.subprocess_exec(
            lambda: _Run(output), *argv,
            stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
            cwd=self.workspace, env=command_env(self.secrets), start_new_session=True))
        try:
            transport, proto = await asyncio.shield(start)
        except BaseException:
            # cancelled while starting: the shell may already run (asyncio itself would kill only the
            # shell, not what it started), so let the start finish and then kill the whole group
            start.add_done_callback(_kill_started)
            raise
        pgid = transport.get_pid()  # a new session: the shell leads its own process group
        try:
            timed_out = not await _wait(proto.exited, timeout)
            _kill_group(pgid)
            await _wait(proto.closed, KILL_GRACE)  # False only if something escaped with setsid
            await _wait(proto.exited, KILL_GRACE)
            code = transport.get_returncode()
        except BaseException:  # cancelled (the turn was stopped): nothing may keep running
            _kill_group(pgid)
            try:  # reap it while the loop still runs, briefly
                await _wait(proto.exited, KILL_GRACE)
            except BaseException:
                pass
            raise
        finally:
            transport.close()
        text = output.render(self.redact) or "(no output)"
        if timed_out:
            return f"timed out after {timeout:g} s; the process was killed\n{text}"
        return f"exit code {code}\n{text}"


def _as_timeout(value: Any, default: float) -> float | str:
    if value is None:
        return default
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        return f"error: timeout must be a number of seconds, not {value!r}"
    return min(max(seconds, 1.0), max(MAX_TIMEOUT, default))


def _terminal(shell: _Shell) -> ToolHandler:
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
        state = shell.touches_protected(command) if not sandboxed or outside else None
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
            outcome = await ctx.approvals.request(ctx, ApprovalRequest("command", shell.redact(subject), reasons))
            if not outcome.approved:
                return f"{outcome.message}\nThe command was NOT run."
            return f"{outcome.message}\n{await shell.run(command, seconds, confined=not outside)}"
        return await shell.run(command, seconds)

    return terminal


# --- files ---------------------------------------------------------------------------------------

# Inside the workspace too, a write here can make code run later (git hooks and config, direnv,
# shell rc files, user units, ~/.local/bin) or hand over credentials: it asks, showing the diff.
_SENSITIVE = re.compile(
    r"(^|/)(\.git/(hooks/|config$)|\.gitconfig$|\.gitmodules$|\.envrc$|\.ssh/|\.gnupg/|\.netrc$|\.npmrc$|"
    r"\.pypirc$|\.docker/config\.json$|\.config/systemd/|\.config/autostart/|\.local/bin/|\.pam_environment$|"
    r"\.(bash|zsh|ksh|csh|tcsh|mksh)rc$|\.(bash_)?profile$|\.bash_(login|logout)$|\.z(profile|login|logout|env)$|"
    r"\.config/fish/)")


@dataclass(frozen=True, slots=True)
class _Target:
    """A file the tools may use: `relative` inside the workspace (opened beneath it, no links
    followed), or `outside`, a path a person approved."""

    shown: str
    relative: str | None = None
    outside: Path | None = None


@dataclass(frozen=True, slots=True)
class _Files:
    workspace: Path
    output_limit: int
    redact: _Redactor

    def root(self) -> Path:
        self.workspace.mkdir(parents=True, exist_ok=True)
        return Path(os.path.realpath(self.workspace))

    async def resolve(self, ctx: ToolContext, path: str, verb: str) -> _Target | str:
        """Where `path` (relative to the workspace) really is, or an error text for the model; a path
        that leads out of the workspace (`..`, a link) needs a person's approval."""
        if not isinstance(path, str) or not path.strip():
            return "error: path must be a non-empty string"
        root = self.root()
        target = Path(os.path.realpath(root / Path(path).expanduser()))
        if target == root or target.is_relative_to(root):  # opened by its real path, beneath the root and
            relative = os.path.relpath(target, root)  # following no link: a link swapped in since is refused
            return _Target(relative, relative=relative)
        what = {"read": "read", "write": "written", "patch": "changed", "send": "sent"}[verb]
        refusal = await self.ask(ctx, f"{verb} {target}", ("outside the workspace",), f"The file was NOT {what}.")
        return refusal or _Target(str(target), outside=target)

    async def ask(self, ctx: ToolContext, subject: str, reasons: tuple[str, ...], not_done: str) -> str | None:
        """None when a person approved; else what to tell the model."""
        if ctx.approvals is None:
            return f"refused: this needs a person's approval ({'; '.join(reasons)}) and nobody can approve here. {not_done}"
        outcome = await ctx.approvals.request(ctx, ApprovalRequest("file", self.redact(subject), reasons))
        return None if outcome.approved else f"{outcome.message}\n{not_done}"

    async def confirm_write(self, ctx: ToolContext, target: _Target, old: str | None, new: str) -> str | None:
        """A write to a sensitive place inside the workspace asks, showing the change."""
        if target.relative is None or not _SENSITIVE.search(target.relative):
            return None
        diff = "".join(difflib.unified_diff((old or "").splitlines(keepends=True), new.splitlines(keepends=True),
                                            f"a/{target.shown}", f"b/{target.shown}"))
        return await self.ask(ctx, f"write {target.shown}\n{_clip(diff, 3000)}",
                              ("a file whose content can run code or hold credentials",), "The file was NOT written.")

    def read(self, target: _Target) -> str | tuple[str]:
        """The file's text, or a 1-tuple holding an error message (so a str result is always content)."""
        shown = target.shown
        try:
            if target.relative is not None:
                data = Beneath(self.root()).read(target.relative, MAX_READ_BYTES)
            else:
                assert target.outside is not None
                if target.outside.is_dir():
                    return (f"error: {shown} is a directory",)
                size = target.outside.stat().st_size
                if size > MAX_READ_BYTES:
                    raise TooLarge(size)
                data = target.outside.read_bytes()
        except TooLarge as big:
            return (f"error: {shown} is {big.size:,} bytes; files over {MAX_READ_BYTES // 1_000_000} MB are not "
                    "read whole — use the terminal (head, tail, grep, sed -n) to look at parts of it",)
        except Refused as exc:
            return (f"error: {exc}",)
        except FileNotFoundError:
            return (f"error: no such file: {shown}",)
        except OSError as exc:
            return (f"error: cannot read {shown}: {exc.strerror or exc}",)
        if b"\0" in data[:8192]:
            return (f"error: {shown} is a binary file; read_file shows text only",)
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            return (f"error: {shown} is not UTF-8 text (binary?); read_file shows text only",)

    def write(self, target: _Target, text: str) -> None:
        if target.relative is not None:
            Beneath(self.root()).write(target.relative, text.encode("utf-8"))
        else:
            assert target.outside is not None
            _atomic_write(target.outside, text)


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else f"{text[:limit]}\n[… {len(text) - limit} more characters not shown]"


def _atomic_write(target: Path, text: str) -> None:
    """Write the whole file or nothing: a temporary file beside it, then os.replace."""
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        mode = stat.S_IMODE(target.stat().st_mode)
    except FileNotFoundError:
        mode = 0o644
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(text.encode("utf-8"))
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _numbered(text: str, shown: str, offset: int, limit: int, budget: int) -> str:
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if not lines:
        return f"{shown} is empty."
    if offset >= len(lines):
        return f"error: {shown} has {len(lines)} lines; offset {offset} is past the end"
    out: list[str] = []
    used = 0
    end = offset
    for number in range(offset + 1, min(offset + limit, len(lines)) + 1):
        line = lines[number - 1].rstrip("\r")
        if len(line) > MAX_LINE_CHARS:
            line = f"{line[:MAX_LINE_CHARS]}… [{len(line) - MAX_LINE_CHARS} more characters on this line]"
        row = f"{number:>6}\t{line}"
        if out and used + len(row) + 1 > budget:
            break
        out.append(row)
        used += len(row) + 1
        end = number
    if end < len(lines):
        out.append(f"[lines {offset + 1}–{end} of {len(lines)}; call read_file with offset={end} to read on]")
    return "\n".join(out)


def _read_file(files: _Files) -> ToolHandler:
    async def read_file(ctx: ToolContext, path: str, offset: int = 0, limit: int = 2000) -> str:
        try:
            offset, limit = max(int(offset), 0), max(int(limit), 1)
        except (TypeError, ValueError):
            return "error: offset and limit must be whole numbers"
        target = await files.resolve(ctx, path, "read")
        if isinstance(target, str):
            return target
        text = await asyncio.to_thread(files.read, target)
        if isinstance(text, tuple):
            return text[0]
        return _numbered(text, target.shown, offset, limit, files.output_limit)

    return read_file


def _write_file(files: _Files) -> ToolHandler:
    async def write_file(ctx: ToolContext, path: str, content: str) -> str:
        if not isinstance(content, str):
            return "error: content must be a string (the whole new file)"
        target = await files.resolve(ctx, path, "write")
        if isinstance(target, str):
            return target
        shown = target.shown
        if target.outside is not None and target.outside.is_dir():
            return f"error: {shown} is a directory"
        if target.relative is not None and _SENSITIVE.search(target.relative):
            before = await asyncio.to_thread(files.read, target)
            refusal = await files.confirm_write(ctx, target, before if isinstance(before, str) else None, content)
            if refusal is not None:
                return refusal
        try:
            await asyncio.to_thread(files.write, target, content)
        except Refused as exc:
            return f"error: {exc}"
        except OSError as exc:
            return f"error: cannot write {shown}: {exc.strerror or exc}"
        lines = content.count("\n") + (1 if content and not content.endswith("\n") else 0)
        return f"wrote {_plural(len(content), 'character')} ({_plural(lines, 'line')}) to {shown}"

    return write_file


def _patched(text: str, shown: str, old: str, new: str, count: int) -> tuple[str, str]:
    """(the new text, what to say), or ("", an error) when nothing may change."""
    found = text.count(old)
    if found == 0:
        return "", (f"error: the old text was not found in {shown}; nothing was changed. It must match exactly, "
                    "including spaces, indentation and line breaks — read the file and copy it")
    if count and found > count:
        return "", (f"error: the old text occurs {found} times in {shown} but count={count}; nothing was "
                    "changed. Include more surrounding lines to make it unique, or pass count=0 to replace every "
                    "occurrence")
    first_line = text[:text.index(old)].count("\n") + 1
    where = f"first at line {first_line}" if found > 1 else f"at line {first_line}"
    return text.replace(old, new), f"replaced {_plural(found, 'occurrence')} in {shown} ({where})"


def _patch_file(files: _Files) -> ToolHandler:
    async def patch_file(ctx: ToolContext, path: str, old: str, new: str, count: int = 1) -> str:
        if not isinstance(old, str) or not isinstance(new, str):
            return "error: old and new must be strings"
        if not old:
            return "error: old must not be empty; use write_file to write a whole file"
        try:
            count = int(count)
        except (TypeError, ValueError):
            return "error: count must be a whole number (0 = replace every occurrence)"
        if count < 0:
            return "error: count must be 0 (every occurrence) or more"
        target = await files.resolve(ctx, path, "patch")
        if isinstance(target, str):
            return target
        text = await asyncio.to_thread(files.read, target)
        if isinstance(text, tuple):
            return text[0]
        changed, said = _patched(text, target.shown, old, new, count)
        if not changed and said.startswith("error"):
            return said
        refusal = await files.confirm_write(ctx, target, text, changed)
        if refusal is not None:
            return refusal
        try:
            await asyncio.to_thread(files.write, target, changed)
        except Refused as exc:
            return f"error: {exc}"
        except OSError as exc:
            return f"error: cannot write {target.shown}: {exc.strerror or exc}"
        return said

    return patch_file


def _send_file(files: _Files) -> ToolHandler:
    async def send_file(ctx: ToolContext, path: str) -> str:
        if ctx.files is None:
            return "error: files cannot be sent from this conversation; tell the person where the file is instead"
        target = await files.resolve(ctx, path, "send")
        if isinstance(target, str):
            return target
        if target.relative is not None:
            if not await asyncio.to_thread(Beneath(files.root()).is_file, target.relative):
                return f"error: {target.shown} is not a regular file (or goes through a symbolic link)"
            ctx.files.attach(files.root() / target.relative)
        else:
            assert target.outside is not None
            if not target.outside.is_file():
                return f"error: {target.shown} is not a file"
            ctx.files.attach(target.outside)
        return f"{target.shown} will be sent to the person right after your reply"

    return send_file


# --- the factory ---------------------------------------------------------------------------------

def _redacting(handler: ToolHandler, redact: _Redactor) -> ToolHandler:
    async def wrapper(ctx: ToolContext, **arguments: Any) -> str:
        return redact(await handler(ctx, **arguments))

    wrapper.__name__ = getattr(handler, "__name__", "tool")
    return wrapper


def system_tools(workspace: Path, *, secrets: Sequence[str] = (), timeout: float = 60.0,
                 output_limit: int = 16_000, sandbox: Sandbox | None = None,
                 protected: Sequence[Path] = ()) -> list[Tool]:
    """The "system" toolset: `terminal`, `read_file`, `write_file`, `patch_file`, `send_file`, rooted at `workspace`.

    `secrets` are values (API keys, bot tokens) that must never reach the model: environment
    variables containing one are not passed to commands, and every result has them as ``***``.
    Values shorter than MIN_SECRET_LEN characters are ignored. Commands run in `sandbox`
    (default: bubblewrap where it works, see `agent.sandbox`); without one, a command that names
    a `protected` folder (chatgate's home), or leaves the workspace with `..` into it, asks first.
    """
    workspace = Path(workspace).expanduser().absolute()
    redact = _Redactor(secrets)
    sandbox = sandbox if sandbox is not None else Sandbox()
    shell = _Shell(workspace, redact, tuple(secrets), float(timeout), int(output_limit), sandbox,
                   tuple(Path(os.path.realpath(p)) for p in protected))
    files = _Files(workspace, int(output_limit), redact)
    cap = int(max(MAX_TIMEOUT, timeout))
    tools = [
        Tool("terminal",
             f"Run a bash command in the workspace ({workspace}) and get back 'exit code N' followed by its "
             f"combined stdout and stderr. No input can be typed, so interactive programs will not work. "
             f"Stops after {timeout:g} s unless you pass timeout (max {cap} s); on timeout the result starts "
             f"with 'timed out'. Processes the command leaves in the background are stopped when it ends. "
             f"Output over {output_limit} characters is cut in the middle. Dangerous commands wait for a "
             f"person's approval (if refused, the result says the command was NOT run); some are never run. "
             f"Commands run in a sandbox when one is available: only the workspace can be written, there is "
             f"no network and no access to the user's home; if a command needs those, run it again with "
             f"outside_sandbox=true, which always asks a person first.",
             {"type": "object", "required": ["command"],
              "properties": {
                  "command": {"type": "string", "description": "the command line, run by bash"},
                  "timeout": {"type": "integer", "minimum": 1, "maximum": cap,
                              "description": f"seconds before the command is killed (default {timeout:g})"},
                  "outside_sandbox": {"type": "boolean",
                                      "description": "run it outside the sandbox (asks a person first)"}}},
             _terminal(shell), TOOLSET, side_effects=True),
        Tool("read_file",
             "Read a text file, as numbered lines ('     1<TAB>text'). Paths are relative to the workspace; "
             "a path outside it needs a person's approval. Long files come in pages: the result then ends "
             "with the offset to continue from. Binary files and files over 2 MB give an error.",
             {"type": "object", "required": ["path"],
              "properties": {
                  "path": {"type": "string", "description": "file path, relative to the workspace"},
                  "offset": {"type": "integer", "minimum": 0, "description": "lines to skip (default 0)"},
                  "limit": {"type": "integer", "minimum": 1, "description": "most lines to return (default 2000)"}}},
             _read_file(files), TOOLSET),
        Tool("write_file",
             "Write a whole text file (UTF-8), replacing it if it exists and creating missing folders. "
             "The write is atomic. Paths are relative to the workspace; a path outside it needs a person's "
             "approval. To change part of a file, use patch_file instead.",
             {"type": "object", "required": ["path", "content"],
              "properties": {
                  "path": {"type": "string", "description": "file path, relative to the workspace"},
                  "content": {"type": "string", "description": "the complete new content of the file"}}},
             _write_file(files), TOOLSET, side_effects=True),
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
             _patch_file(files), TOOLSET, side_effects=True),
        Tool("send_file",
             "Send a file to the person you are talking to (a report, an image, an archive you made); it "
             "arrives right after your reply. Paths are relative to the workspace; a file outside it needs a "
             "person's approval.",
             {"type": "object", "required": ["path"],
              "properties": {"path": {"type": "string", "description": "file path, relative to the workspace"}}},
             _send_file(files), TOOLSET),
    ]
    return [Tool(t.name, t.description, t.parameters, _redacting(t.handler, redact), t.toolset, t.side_effects)
            for t in tools]
