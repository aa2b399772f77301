"""Which files of the workspace a command would run — asked about when there is no sandbox.

Without bubblewrap a command runs with chatgate's own rights, and the classifier sees only the
command line: `sh run.sh` is harmless text, whatever `run.sh` (written by the agent a moment ago)
contains. So a command that runs code from the workspace — a script given to an interpreter or run
directly, a sourced file, a Makefile, package.json scripts, a setup.py, a Cargo build script, git
hooks or a git config that names programs — is shown to a person with that code first.
"""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path

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
_SEGMENTS = re.compile(r"\|\||&&|[;|&\n()]")


def _words(segment: str) -> list[str]:
    try:
        return shlex.split(segment, comments=True)
    except ValueError:
        return segment.split()


def _file(workspace: Path, name: str) -> Path | None:
    if not name or name.startswith("-"):
        return None
    path = Path(os.path.normpath(workspace / name))
    return path if path.is_relative_to(workspace) and path.is_file() and not path.is_symlink() else None


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
            hooks = workspace / ".git" / "hooks"
            found += sorted(p for p in hooks.glob("*") if p.is_file() and not p.name.endswith(".sample"))
            config = workspace / ".git" / "config"
            if config.is_file() and re.search(r"(?im)^\s*(hookspath|fsmonitor|pager|editor|sshcommand|askpass)\s*=",
                                              config.read_text(errors="replace")):
                found.append(config)
    return list(dict.fromkeys(found))


def show_code(paths: list[Path], workspace: Path, limit: int = 2500) -> str:
    """The files' contents, for the approval prompt (cut with a mark when long)."""
    parts = []
    for path in paths:
        text = path.read_text(errors="replace")
        if len(text) > limit:
            text = f"{text[:limit]}\n[… {len(text) - limit:,} more characters NOT shown …]"
        parts.append(f"--- {path.relative_to(Path(os.path.realpath(workspace)))} ---\n{text.rstrip()}")
    return "\n".join(parts)
