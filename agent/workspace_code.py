"""Which files of the workspace a command would run — asked about when there is no sandbox.

Without bubblewrap a command runs with chatgate's own rights, and the classifier sees only the
command line: `sh run.sh` is harmless text, whatever `run.sh` (written by the agent a moment ago)
contains. So a command that runs code from the workspace — a script given to an interpreter or run
directly, a sourced file, a Makefile, package.json scripts, a setup.py, a Cargo build script, git
hooks or a git config that names programs — is shown to a person with that code first.

Only what is really in the workspace is read for that: a regular file reached with no symbolic link
on the way (`agent.beneath`), its first few KiB. A link, a file through a linked folder, a hooks
folder that is a link, a FIFO or a device is named in the prompt as "not shown", and still asks.
"""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path

from agent.beneath import Beneath, Refused, ThroughLink

INTERPRETERS = frozenset({"sh", "bash", "zsh", "dash", "ksh", "fish", "python", "python3", "node", "nodejs", "perl",
                          "ruby", "php", "lua", "Rscript", "deno", "bun", "tsx", "ts-node", "awk", "gawk", "tclsh"})
BUILD_FILES = {  # a command word → the files whose code it runs
    "make": ("Makefile", "makefile", "GNUmakefile"),
    "npm": ("package.json",), "yarn": ("package.json",), "pnpm": ("package.json",), "npx": ("package.json",),
    "pip": ("setup.py", "pyproject.toml"), "pip3": ("setup.py", "pyproject.toml"),
    "cargo": ("build.rs",), "cmake": ("CMakeLists.txt",), "gradle": ("build.gradle", "build.gradle.kts"),
    "mvn": ("pom.xml",), "rake": ("Rakefile",), "just": ("justfile", "Justfile"), "tox": ("tox.ini",),
    "nox": ("noxfile.py",), "invoke": ("tasks.py",), "docker": ("Dockerfile",),
}
GIT_RUNS_HOOKS = frozenset({"commit", "merge", "rebase", "checkout", "switch", "push", "pull", "am", "cherry-pick",
                            "revert", "fetch", "clone", "status", "diff", "log"})  # fsmonitor/pager run on any
SHOWN_BYTES = 2500  # of each file, in the prompt: only that much is read
SCAN_BYTES = 64 * 1024  # of .git/config, looking for programs it names
MAX_SHOWN_FILES = 8
_SEGMENTS = re.compile(r"\|\||&&|[;|&\n()]")


def _words(segment: str) -> list[str]:
    try:
        return shlex.split(segment, comments=True)
    except ValueError:
        return segment.split()


def _file(workspace: Path, name: str) -> Path | None:
    """The workspace path a command word names, if something other than a folder is there. Nothing
    is followed: a link, or a path through one, is named too (and shown as a link, not read)."""
    if not name or name.startswith("-"):
        return None
    path = Path(os.path.normpath(workspace / name))
    if not path.is_relative_to(workspace) or path == workspace:
        return None
    kind = Beneath(workspace).kind(str(path.relative_to(workspace)))
    return path if kind not in (None, "dir") else None


def _hooks(workspace: Path) -> list[Path]:
    """The git hooks a git command would run; a hooks folder that is (or goes through) a link is named
    itself: what it holds cannot be shown."""
    where = Beneath(workspace)
    kind = where.kind(".git/hooks")
    if kind is None or kind == "other":
        return []
    if kind != "dir":
        return [workspace / ".git" / "hooks"]
    try:
        names = where.listing(".git/hooks")
    except (OSError, Refused):
        return [workspace / ".git" / "hooks"]
    return [workspace / ".git" / "hooks" / n for n in names
            if not n.endswith(".sample") and where.kind(f".git/hooks/{n}") not in (None, "dir")]


def _git_config_runs(workspace: Path) -> bool:
    """The workspace's .git/config names programs git runs (or cannot be read to tell)."""
    where = Beneath(workspace)
    kind = where.kind(".git/config")
    if kind is None or kind == "dir":
        return False
    try:
        text = where.head(".git/config", SCAN_BYTES)[0].decode("utf-8", errors="replace")
    except (OSError, Refused):
        return True
    return bool(re.search(r"(?im)^\s*(hookspath|fsmonitor|pager|editor|sshcommand|askpass)\s*=", text))


def files_run(command: str, workspace: Path) -> list[Path]:
    """The workspace files `command` would run (best effort over the words of each segment)."""
    workspace = Path(os.path.realpath(workspace))
    found: list[Path] = []
    for segment in _SEGMENTS.split(command):
        words = [w for w in _words(segment) if not re.fullmatch(r"[A-Za-z_]\w*=.*", w)]
        while words and words[0] in ("sudo", "env", "exec", "time", "nice", "nohup", "timeout", "command"):
            words = words[1:] if words[0] != "timeout" else words[2:]
        if not words:
            continue
        name = os.path.basename(words[0])
        if "/" in words[0] and (path := _file(workspace, words[0])):  # ./run.sh, scripts/deploy
            found.append(path)
        if name in ("source", ".") and len(words) > 1 and (path := _file(workspace, words[1])):
            found.append(path)
        if name in INTERPRETERS or re.fullmatch(r"python3?\.\d+", name):
            found += [p for w in words[1:] if (p := _file(workspace, w))][:1]
        for build in BUILD_FILES.get(name, ()):
            if path := _file(workspace, build):
                found.append(path)
        if name == "git" and any(w in GIT_RUNS_HOOKS for w in words[1:]):
            found += _hooks(workspace)
            if _git_config_runs(workspace):
                found.append(workspace / ".git" / "config")
    return list(dict.fromkeys(found))


def _shown(where: Beneath, relative: str, limit: int) -> str:
    """A file's first `limit` characters (read: at most `limit` bytes), or why it is not shown."""
    kind = where.kind(relative)
    if kind == "link":
        return "[not shown: a symbolic link, or a path through one — what it points to runs]"
    if kind == "dir":
        return "[not shown: a folder (a link to it, or links in it, are not followed)]"
    try:
        data, size = where.head(relative, limit)
    except ThroughLink:
        return "[not shown: a symbolic link, or a path through one — what it points to runs]"
    except Refused as exc:
        return f"[not shown: {exc}]"
    except OSError as exc:
        return f"[not shown: it cannot be read ({exc.strerror or exc})]"
    if b"\0" in data:
        return f"[not shown: a binary file of {size:,} bytes]"
    text = data.decode("utf-8", errors="replace").rstrip()
    if size > len(data):
        text += f"\n[… {size - len(data):,} more bytes NOT shown …]"
    return text


def show_code(paths: list[Path], workspace: Path, limit: int = SHOWN_BYTES) -> str:
    """The files' contents, for the approval prompt: regular files reached with no link on the way,
    the first `limit` bytes of each (only that much is read); any other is named with why not."""
    workspace = Path(os.path.realpath(workspace))
    where = Beneath(workspace)
    parts = []
    for path in paths[:MAX_SHOWN_FILES]:
        relative = str(path.relative_to(workspace))
        parts.append(f"--- {relative} ---\n{_shown(where, relative, limit)}")
    if len(paths) > MAX_SHOWN_FILES:
        parts.append(f"[… and {len(paths) - MAX_SHOWN_FILES} more files NOT shown: "
                     f"{', '.join(p.name for p in paths[MAX_SHOWN_FILES:])}]")
    return "\n".join(parts)
