"""The file tools: `read_file`, `write_file`, `patch_file` and `send_file`, rooted at the workspace.

A path inside the workspace is opened beneath it without following links (`agent.safety.beneath`); a
path that leads out of it (after `..` and links are resolved) needs a person's approval.
"""

from __future__ import annotations

import asyncio
import difflib
import hashlib
import os
import re
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Collection

from agent.safety.beneath import Beneath, Identity, Refused, TooLarge, identities
from agent.safety.workspace_gate import gate_for
from agent.tools.contract import ApprovalRequest, ToolContext, ToolHandler
from agent.tools.redaction import Redactor

MAX_READ_BYTES = 2_000_000  # read_file and patch_file refuse larger files
MAX_LINE_CHARS = 2_000  # read_file shortens longer lines
MAX_DIFF_LINES = 2_000  # a prompt compares at most this many lines (difflib's time grows with their square)

# Inside the workspace too, a write here can make code run later (anything of git's own: hooks, config,
# the pointers `.git` and `commondir` that send git elsewhere; direnv, shell rc files, user units,
# ~/.local/bin) or hand over credentials: it asks, showing the diff.
_SENSITIVE = re.compile(
    r"(^|/)(\.git(/|$)|\.config/git/|\.bash_aliases$|\.gitconfig$|\.gitmodules$|\.envrc$|\.ssh/|\.gnupg/|"
    r"\.netrc$|\.npmrc$|\.pypirc$|\.docker/config\.json$|\.config/systemd/|\.config/autostart/|\.local/bin/|"
    r"\.pam_environment$|\.(bash|zsh|ksh|csh|tcsh|mksh)rc$|\.(bash_)?profile$|\.bash_(login|logout)$|"
    r"\.z(profile|login|logout|shenv)$|\.config/fish/)")


@dataclass(frozen=True, slots=True)
class _Target:
    """A file the tools may use: `relative` inside the workspace (opened beneath it, no links
    followed), or `outside`, a path a person approved."""

    shown: str
    relative: str | None = None
    outside: Path | None = None


@dataclass(frozen=True, slots=True)
class Files:
    workspace: Path
    output_limit: int
    redact: Redactor
    protected: tuple[Path, ...] = ()  # chatgate's state: its files are never opened, under any name

    def own(self) -> frozenset[Identity]:
        """Identities of chatgate's own files (the database with -wal and -shm, the config, tokens):
        opening and closing the database as a plain file would drop the daemon's SQLite locks, and
        a hard link carries them under any name."""
        return identities(self.protected)

    def root(self) -> Path:
        self.workspace.mkdir(parents=True, exist_ok=True)
        return Path(os.path.realpath(self.workspace))

    async def resolve(self, ctx: ToolContext, path: str, verb: str) -> _Target | str:
        """Where `path` (relative to the workspace) really is, or an error text for the model; a path
        that leads out of the workspace (`..`, a link) needs a person's approval."""
        if not isinstance(path, str) or not path.strip():
            return "error: path must be a non-empty string"
        if "\0" in path or len(path) > 4096:  # (resolving 100,000 `l/` parts takes a second, on the event loop)
            return "error: path must not contain NUL characters nor be longer than 4096 characters"
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
        change = await asyncio.to_thread(_change, old or "", new, target.shown)
        return await self.ask(ctx, f"write {target.shown}\n{change}",
                              ("a file whose content can run code or hold credentials",), "The file was NOT written.")

    def read(self, target: _Target) -> str | tuple[str]:
        """The file's text, or a 1-tuple holding an error message (so a str result is always content)."""
        shown = target.shown
        try:
            if target.relative is not None:
                data = Beneath(self.root()).read(target.relative, MAX_READ_BYTES, self.own())
            else:
                assert target.outside is not None
                if target.outside.is_dir():
                    return (f"error: {shown} is a directory",)
                data = Beneath("/").read(os.path.relpath(target.outside, "/"), MAX_READ_BYTES, self.own())
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
    """The start of `text`; what is cut is counted and fingerprinted (a grant is for the prompt's text:
    another change with the same start must not match it)."""
    if len(text) <= limit:
        return text
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return f"{text[:limit]}\n[… {len(text) - limit} more characters not shown; fingerprint {digest}]"


def _change(old: str, new: str, shown: str) -> str:
    """The change a write makes, for the prompt: a unified diff, or — past MAX_DIFF_LINES lines, where
    comparing takes minutes — the start of the new content."""
    before, after = old.splitlines(keepends=True), new.splitlines(keepends=True)
    if max(len(before), len(after)) > MAX_DIFF_LINES:
        return _clip(f"[{len(before):,} lines become {len(after):,}: too long to compare; the new content:]\n{new}",
                     3000)
    return _clip("".join(difflib.unified_diff(before, after, f"a/{shown}", f"b/{shown}")), 3000)


def _atomic_write(target: Path, text: str) -> None:
    """Write the whole file or nothing: a temporary file beside it, then os.replace."""
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        mode = stat.S_IMODE(target.stat().st_mode) & ~(stat.S_ISUID | stat.S_ISGID)
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


def read_file_tool(files: Files) -> ToolHandler:
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


def write_file_tool(files: Files) -> ToolHandler:
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
            async with gate_for(files.workspace).shared():  # (not while a command runs unconfined)
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
    size = len(text) + found * (len(new) - len(old))  # (count=0: a million `a` → `b` × 1,000 is 1 GB in memory)
    if size > MAX_READ_BYTES:
        return "", (f"error: the result would be {size:,} characters; patch_file keeps files under "
                    f"{MAX_READ_BYTES // 1_000_000} MB (as read_file reads them); nothing was changed")
    first_line = text[:text.index(old)].count("\n") + 1
    where = f"first at line {first_line}" if found > 1 else f"at line {first_line}"
    return text.replace(old, new), f"replaced {_plural(found, 'occurrence')} in {shown} ({where})"


def patch_file_tool(files: Files) -> ToolHandler:
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
            async with gate_for(files.workspace).shared():
                await asyncio.to_thread(files.write, target, changed)
        except Refused as exc:
            return f"error: {exc}"
        except OSError as exc:
            return f"error: cannot write {target.shown}: {exc.strerror or exc}"
        return said

    return patch_file


MAX_SEND_BYTES = 50 * 1024 * 1024  # send_file refuses larger files (Telegram's upload limit)


def _open_to_send(files: Files, target: _Target, refuse: Collection[Identity]) -> int:
    """A read descriptor of the file to send: beneath the workspace with no link on the way, or an
    approved outside path walked from / the same way (its real path, resolved before it was asked
    about: a link there now was put there since). Never one of the files in `refuse`."""
    if target.relative is not None:
        return Beneath(files.root()).open_regular(target.relative, refuse)
    assert target.outside is not None
    return Beneath("/").open_regular(os.path.relpath(target.outside, "/"), refuse)


def send_file_tool(files: Files) -> ToolHandler:
    async def send_file(ctx: ToolContext, path: str) -> str:
        sink = ctx.files
        if sink is None:
            return "error: files cannot be sent from this conversation; tell the person where the file is instead"
        target = await files.resolve(ctx, path, "send")
        if isinstance(target, str):
            return target
        shown = target.shown
        try:  # captured now: what is sent is what the file holds now, whatever happens to its path later
            fd = await asyncio.to_thread(lambda: _open_to_send(files, target, files.own()))
        except TooLarge as big:
            return _too_large(shown, big.size)
        except Refused as exc:
            return f"error: {exc}"
        except FileNotFoundError:
            return f"error: no such file: {shown}"
        except OSError as exc:
            return f"error: cannot read {shown}: {exc.strerror or exc}"
        name = Path(path).name if Path(path).name not in ("", ".", "..") else Path(shown).name
        where = str(files.root() / target.relative) if target.relative is not None else shown
        try:
            await sink.keep(fd, name, where, MAX_SEND_BYTES)
        except TooLarge as big:
            return _too_large(shown, big.size)
        except Refused as exc:
            return f"error: {exc}"
        except OSError as exc:
            return f"error: could not keep a copy of {shown} to send: {exc.strerror or exc}"
        finally:
            os.close(fd)
        return (f"{shown} will be sent to the person right after your reply (as it is now: a change to it "
                "from here on is not sent)")

    return send_file


def _too_large(shown: str, size: int) -> str:
    return (f"error: {shown} is {size:,} bytes; at most {MAX_SEND_BYTES // (1024 * 1024)} MB can be sent — "
            "compress or split it first")
