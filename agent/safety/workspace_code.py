"""Which files of the workspace a command would run — asked about when there is no sandbox.

Without bubblewrap a command runs with chatgate's own rights, and the classifier sees only the
command line: `sh run.sh` is harmless text, whatever `run.sh` (written by the agent a moment ago)
contains. So a command that runs code from the workspace — a script given to an interpreter or run
directly, a sourced file, a Makefile, package.json scripts, a setup.py, a Cargo build script, git
hooks or a git config that names programs — is shown to a person with that code first.

Only what is really in the workspace is read for that: a regular file reached with no symbolic link
on the way (`agent.safety.beneath`) and with no other hard link, its first few KiB. A link, a file through a
linked folder, a hooks folder that is a link, a FIFO or a device is named in the prompt as "not
shown", and still asks. For git, the repository's own pointers are followed within the workspace
(a `.git` file's `gitdir:`, `commondir`): the hooks and config of the folder they name are what runs.
"""

from __future__ import annotations

import hashlib
import os
import re
import shlex
import stat
from pathlib import Path

from agent.safety.beneath import Beneath, Refused, ThroughLink

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
SHOWN_BYTES = 2500  # of each file, in the prompt: only that much is read
SCAN_BYTES = 64 * 1024  # of a git config, looking for programs it names
HASHED_BYTES = 1 << 20  # of each file, for `fingerprint`
# Words of a git config that name a program git may run (or a file that does): shown when one is there.
_GIT_PROGRAMS = re.compile(r"(?i)fsmonitor|pager|external|textconv|command|filter|hook|worktree|include|program|"
                           r"showsignature|gpg|submodule|alternate|helper|editor|askpass|proxy|alias|receivepack|"
                           r"uploadpack|driver|protocol|ext::")
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


def _hooks(workspace: Path, git: str) -> list[Path]:
    """The hooks in the git folder `git` (relative to the workspace) git would run; a hooks folder that
    is (or goes through) a link is named itself: what it holds cannot be shown."""
    where = Beneath(workspace)
    kind = where.kind(f"{git}/hooks")
    if kind is None or kind == "other":
        return []
    if kind != "dir":
        return [workspace / git / "hooks"]
    try:
        names = where.listing(f"{git}/hooks")
    except (OSError, Refused):
        return [workspace / git / "hooks"]
    return [workspace / git / "hooks" / n for n in names
            if not n.endswith(".sample") and where.kind(f"{git}/hooks/{n}") not in (None, "dir")]


def _config_runs(workspace: Path, config: str) -> bool:
    """The git config `config` names programs git runs (or cannot be read to tell)."""
    where = Beneath(workspace)
    kind = where.kind(config)
    if kind is None or kind == "dir":
        return False
    try:
        text = where.head(config, SCAN_BYTES)[0].decode("utf-8", errors="replace")
    except (OSError, Refused):
        return True
    return bool(_GIT_PROGRAMS.search(text))


def _pointed(workspace: Path, pointer: str, prefix: str) -> str | None:
    """The workspace folder (relative) that the git pointer file `pointer` names after `prefix`
    (`gitdir:` of a `.git` file, nothing for `commondir`), or None: unreadable, or not in the workspace."""
    try:
        text = Beneath(workspace).head(pointer, 4096)[0].decode("utf-8", errors="replace").strip()
    except (OSError, Refused):
        return None
    if not text.startswith(prefix):
        return None
    target = Path(os.path.normpath(workspace / os.path.dirname(pointer) / text[len(prefix):].strip()))
    return str(target.relative_to(workspace)) if target.is_relative_to(workspace) and target != workspace else None


def _git_code(workspace: Path) -> list[Path]:
    """What a git command here could run: hooks, a config that names programs, and the pointers that
    send git to another folder (`.git` as a file or a link, `commondir`) — followed in the workspace."""
    where = Beneath(workspace)
    kind = where.kind(".git")
    if kind is None:
        return []
    found: list[Path] = []
    folders = [".git"]
    if kind != "dir":  # `gitdir: somewhere`, a link, …: named (shown when it is a file) and followed
        found.append(workspace / ".git")
        folders = [f] if kind == "file" and (f := _pointed(workspace, ".git", "gitdir:")) else []
    for git in folders:
        found += _hooks(workspace, git)
        if _config_runs(workspace, f"{git}/config"):
            found.append(workspace / git / "config")
        if where.kind(f"{git}/commondir") is not None:
            found.append(workspace / git / "commondir")
            if (common := _pointed(workspace, f"{git}/commondir", "")) and common not in folders:
                folders.append(common)
        if where.kind(f"{git}/config.worktree") is not None:
            found.append(workspace / git / "config.worktree")
    return found


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
        if name == "gdb":  # its command files (-x FILE: `shell …` in them runs), and the program it may run
            found += [p for w in words[1:] if (p := _file(workspace, w))]
        for build in BUILD_FILES.get(name, ()):
            if path := _file(workspace, build):
                found.append(path)
        if name == "git":  # any git command: hooks run on most, config programs (fsmonitor, …) on any
            found += _git_code(workspace)
    return list(dict.fromkeys(found))


def _shown(where: Beneath, relative: str, limit: int) -> str:
    """A file's first `limit` characters (read: at most `limit` bytes), or why it is not shown."""
    kind = where.kind(relative)
    if kind == "link":
        try:  # (the link's own words: a grant for it must not cover it pointing elsewhere)
            to = f" to {os.readlink(Path(where.root, relative))!r}"
        except OSError:
            to = ""
        return f"[not shown: a symbolic link{to}, or a path through one — what it points to runs]"
    if kind == "dir":
        return "[not shown: a folder (a link to it, or links in it, are not followed)]"
    try:
        data, size = where.head(relative, limit)
    except ThroughLink:
        return "[not shown: a symbolic link, or a path through one — what it points to runs]"
    except Refused as exc:
        return f"[not shown: {exc}; {_marked(where, [relative])}]"
    except OSError as exc:
        return f"[not shown: it cannot be read ({exc.strerror or exc})]"
    if b"\0" in data:
        return f"[not shown: a binary file of {size:,} bytes; {_marked(where, [relative])}]"
    text = data.decode("utf-8", errors="replace").rstrip()
    if size > len(data):
        text += f"\n[… {size - len(data):,} more bytes NOT shown; {_marked(where, [relative])} …]"
    return text


def _marked(where: Beneath, relatives: list[str]) -> str:
    """A short digest of what the files are now (`fingerprint`), for what a prompt cannot show: a grant
    ("allow for this session") is for the prompt's text, so a change past the shown part must change it."""
    root = Path(where.root)
    seen = repr([fingerprint(root / r, root) for r in relatives]).encode()
    return f"fingerprint {hashlib.sha256(seen).hexdigest()[:16]}"


def fingerprint(path: Path, workspace: Path) -> tuple[object, ...] | None:
    """What `path` (in the workspace) is now, to tell whether it changed: its kind and identity (device,
    inode) and, for a regular file, its size and times (any write changes them) and, reached with no
    link on the way, a hash of its first MiB. None when nothing is there."""
    try:
        info = os.lstat(path)
    except (OSError, ValueError):
        return None
    if not stat.S_ISREG(info.st_mode):  # a folder is itself (a file made in it changes nothing that runs)
        return stat.S_IFMT(info.st_mode), info.st_dev, info.st_ino
    seen = (stat.S_IFMT(info.st_mode), info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)
    try:
        fd = Beneath(workspace).open_regular(str(path.relative_to(workspace)), alone=True)
    except (OSError, ValueError, Refused):
        return (*seen, "not read")
    try:
        return (*seen, hashlib.sha256(os.pread(fd, HASHED_BYTES, 0)).hexdigest())
    finally:
        os.close(fd)


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
        rest = paths[MAX_SHOWN_FILES:]
        parts.append(f"[… and {len(rest)} more files NOT shown: {', '.join(p.name for p in rest)}; "
                     f"{_marked(where, [str(p.relative_to(workspace)) for p in rest])}]")
    return "\n".join(parts)
