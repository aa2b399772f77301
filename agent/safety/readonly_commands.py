"""The commands that run unasked when no sandbox confines them: a short, explicit read-only list.

Without bubblewrap a command runs with chatgate's own rights, and a classifier that looks for
danger (`agent.safety.classifier`) is a list with holes: every program that can start another (awk,
sed, find, tar, git, an editor, a debugger, …) is a way round it. So, unconfined, the question is
turned round: a command runs without a person's yes only when this module can show that it only
reads the workspace. It must be simple commands joined by `|`, `&&`, `||` or `;`, made of plain
words (no expansion, substitution, glob, `~`, redirection other than `2>&1`, `2>/dev/null` and
`>/dev/null`, background `&`, line break or variable assignment); each a program on `COMMANDS`,
used with only the options named there; and every path it names must resolve — links and `..`
followed, at the time of the check — inside the workspace. `git` also needs a repository whose
configuration cannot make it run a program. Anything else is "not on the read-only list": a
person decides.

The words are cut by a small scanner that knows bash's quoting and then split by `shlex`; the
scanner refuses every character whose meaning the two could read differently.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from agent.safety.beneath import Beneath, Refused


@dataclass(frozen=True)
class Spec:
    """How one program may be called. Options not named here make the command ask."""

    why: str  # why it is on the list: it reads, and none of the options below runs, writes or reads elsewhere
    flags: str = ""  # short options without a value, alone or bundled (-la)
    valued: str = ""  # short options whose value is the rest of the word or the next word (-n5, -n 5)
    words: frozenset[str] = frozenset()  # other options, exactly as written (--all, -uno)
    valued_words: frozenset[str] = frozenset()  # long options with a value (--lines=5, --lines 5)
    numbers: bool = False  # -5 (a count)
    operands: str = "paths"  # paths | pattern (the first is a pattern unless -e) | text | none


def _set(*names: str) -> frozenset[str]:
    return frozenset(names)


COMMANDS: dict[str, Spec] = {
    "pwd": Spec("a bash builtin that prints the working folder", flags="LP", operands="none"),
    "echo": Spec("a bash builtin that prints its words; it opens no file", operands="text"),
    "ls": Spec("lists folders; never follows links below those named (no -L, -H)",
               flags="aAlhRrtSd1FisnpcuUvX",
               words=_set("--all", "--almost-all", "--human-readable", "--recursive", "--reverse", "--classify",
                          "--directory", "--size", "--inode", "--numeric-uid-gid", "--group-directories-first")),
    "cat": Spec("prints files", flags="nbsAETvet",
                words=_set("--number", "--number-nonblank", "--squeeze-blank", "--show-all", "--show-ends",
                           "--show-tabs", "--show-nonprinting")),
    "head": Spec("prints the start of files", flags="qv", valued="nc", numbers=True,
                 words=_set("--quiet", "--silent", "--verbose"), valued_words=_set("--lines", "--bytes")),
    "tail": Spec("prints the end of files; not -f/-F/--pid, nor `+N…` first (`tail +1f x` is the old form "
                 "of -f: they wait)", flags="qv", valued="nc", numbers=True,
                 words=_set("--quiet", "--silent", "--verbose"), valued_words=_set("--lines", "--bytes")),
    "wc": Spec("counts lines, words and bytes; not --files0-from (reads names from an unchecked file)",
               flags="lwcmL", words=_set("--lines", "--words", "--bytes", "--chars", "--max-line-length")),
    "sort": Spec("sorts lines; not -o (writes a file), -T (writes temporary files), --compress-program "
                 "(runs one), --files0-from or --random-source (read unchecked files)",
                 flags="bdfghinMrRsuVz", valued="kt", valued_words=_set("--key", "--field-separator"),
                 words=_set("--reverse", "--unique", "--numeric-sort", "--human-numeric-sort", "--ignore-case",
                            "--version-sort", "--stable")),
    "grep": Spec("searches files; -r follows links only where named (and those are checked); not -R (follows "
                 "every link), -f or --exclude-from (read unchecked files), -d/-D (devices)",
                 flags="inrlLcvwxEFPhHoqsIaZzb", valued="eABCm", operands="pattern",
                 valued_words=_set("--regexp", "--include", "--exclude", "--exclude-dir", "--max-count",
                                   "--context", "--after-context", "--before-context"),
                 words=_set("--recursive", "--ignore-case", "--line-number", "--count", "--files-with-matches",
                            "--files-without-match", "--invert-match", "--word-regexp", "--line-regexp",
                            "--extended-regexp", "--fixed-strings", "--only-matching", "--quiet", "--silent",
                            "--no-messages", "--no-filename", "--with-filename")),
    "find": Spec("lists names in a tree, with the tests below only: no -exec/-ok/-delete/-fprint*/-fls "
                 "(run, delete, write), no -L/-follow (would leave through links)", operands="find"),
    "git": Spec("status, diff and log only, without git's own options (-c, -C, --exec-path, …), and only in a "
                "repository whose configuration names no program (see `git_runs_nothing`)", operands="git"),
}
BUILTINS = frozenset({"pwd", "echo"})  # bash runs these itself, whatever PATH holds
MAX_WALKED = 20_000  # entries of the folders a recursive read covers, checked first; past that it asks

GIT: dict[str, Spec] = {
    "status": Spec("", words=_set("-s", "--short", "-b", "--branch", "--porcelain", "--porcelain=v1",
                                  "--porcelain=v2", "--long", "-z", "-u", "-uno", "-unormal", "-uall",
                                  "--untracked-files=no", "--untracked-files=normal", "--untracked-files=all")),
    "diff": Spec("", words=_set("--stat", "--numstat", "--shortstat", "--name-only", "--name-status", "--cached",
                                "--staged", "--no-color", "-p", "--patch", "--no-ext-diff", "--no-textconv", "-w",
                                "--ignore-all-space", "--ignore-space-change", "--check", "--summary",
                                "--word-diff", "-R", "-U0", "-U1", "-U3", "-U5", "-U10")),
    "log": Spec("", valued="n", numbers=True,
                words=_set("--oneline", "--stat", "--shortstat", "--name-only", "--name-status", "-p", "--patch",
                           "--graph", "--decorate", "--all", "--reverse", "--no-merges", "--first-parent",
                           "--abbrev-commit", "--no-color", "--follow"),
                valued_words=_set("--max-count", "--since", "--until", "--after", "--before", "--author",
                                  "--grep")),
}
FIND_VALUED = _set("-name", "-iname", "-path", "-ipath", "-type", "-maxdepth", "-mindepth", "-size", "-mtime",
                   "-mmin")
FIND_PLAIN = _set("-print", "-print0", "!", "-not", "-a", "-and", "-o", "-or", "(", ")", "-empty", "-prune")
# Words in a git config that make status/diff/log run a program or read beyond the repository:
# core.fsmonitor, core.pager/pager.*, diff.external, diff.*.textconv/command, filter.*, core.hooksPath
# (status writes the index: post-index-change), core.worktree and worktree config, include/includeIf,
# gpg.program and log.showSignature, submodules (status recurses into them).
GIT_RISKY = (b"fsmonitor", b"pager", b"external", b"textconv", b"command", b"filter", b"hook", b"worktree",
             b"include", b"program", b"showsignature", b"gpg", b"submodule", b"alternate")
GIT_ENV = ("GIT_DIR", "GIT_WORK_TREE", "GIT_COMMON_DIR", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY",
           "GIT_ALTERNATE_OBJECT_DIRECTORIES", "GIT_EXTERNAL_DIFF", "GIT_PAGER", "GIT_EXEC_PATH",
           "GIT_CONFIG", "GIT_CONFIG_PARAMETERS", "GIT_CONFIG_COUNT")


@dataclass
class _Scan:
    """The state of `split`: where it is, the segment and the word being read."""

    command: str
    i: int = 0
    quote: str = ""
    segment: list[str] = field(default_factory=list)
    word: str = ""  # the current word as written (quotes included): `2` before `>` must be exactly that


def split(command: str) -> list[list[str]] | str:
    """The simple commands of `command` as lists of words, or why it is not plain enough to judge."""
    if any(c in command for c in "\n\r\0"):
        return "a line break"
    s = _Scan(command)
    segments: list[str] = []
    ops: list[str] = []
    n = len(command)
    while s.i < n:
        c = command[s.i]
        if s.quote == "'":
            s.quote = "" if c == "'" else s.quote
            _take(s, c)
        elif s.quote == '"':
            if c in "$`":
                return f"`{c}` inside double quotes (an expansion)"
            if c == "\\" and command[s.i + 1:s.i + 2] in ("$", "`"):  # bash drops that backslash, shlex keeps it
                return f"`\\{command[s.i + 1]}` inside double quotes"
            if c == "\\" and s.i + 1 < n:
                c = command[s.i:s.i + 2]
            elif c == '"':
                s.quote = ""
            _take(s, c)
        elif c in " \t":
            s.segment.append(c)
            s.word = ""
            s.i += 1
        elif c in "'\"":
            s.quote = c
            _take(s, c)
        elif c == "\\":
            if s.i + 1 >= n:
                return "a backslash at the end"
            _take(s, command[s.i:s.i + 2])
        elif c in "|;&":
            op = command[s.i:s.i + 2] if command[s.i:s.i + 2] in ("&&", "||") else c
            if op == "&":
                return "`&` (runs a command in the background)"
            if command[s.i + len(op):s.i + len(op) + 1] in ("|", "&", ";"):
                return f"`{command[s.i:s.i + len(op) + 1]}`"
            segments.append("".join(s.segment))
            ops.append(op)
            s.segment, s.word = [], ""
            s.i += len(op)
        elif c == ">":
            if why := _redirect(s):
                return why
        elif c in "$`":
            return f"`{c}` (an expansion or a substitution)"
        elif c in "*?[":
            return f"`{c}` (a glob: the names it matches are not checked)"
        elif c == "~" and (not s.word or s.word[-1] in "=:"):
            return "`~` (the home folder)"
        elif c in "(){}<#":
            return f"`{c}`"
        else:
            _take(s, c)
    if s.quote:
        return "a quote that is not closed"
    segments.append("".join(s.segment))
    if len(segments) > 1 and ops[-1] == ";" and not segments[-1].strip():
        segments.pop()  # `ls;`
    commands = [shlex.split(segment) for segment in segments]
    if not all(commands):
        return "an empty command"
    return commands


def _take(s: _Scan, text: str) -> None:
    s.segment.append(text)
    s.word += text
    s.i += len(text)


def _redirect(s: _Scan) -> str | None:
    """Consume `2>&1`, `2>/dev/null` or `>/dev/null` at `>` (they open no file that matters); else why not."""
    rest = s.command[s.i + 1:]
    if s.word == "2" and rest.startswith("&1"):
        end = s.i + 3
    elif s.word in ("", "2") and rest.startswith("/dev/null"):
        end = s.i + 1 + len("/dev/null")
    else:
        return "a redirection (`>`): only 2>&1, 2>/dev/null and >/dev/null are plain enough"
    if s.command[end:end + 1] not in ("", " ", "\t", "|", ";", "&"):
        return "a redirection (`>`): only 2>&1, 2>/dev/null and >/dev/null are plain enough"
    if s.word:
        s.segment.pop()  # the `2`
    s.segment.append(" ")
    s.word = ""
    s.i = end
    return None


def _options(args: Sequence[str], spec: Spec) -> tuple[list[str], set[str]] | str:
    """The operands among `args` and the options used (GNU style: options anywhere before `--`)."""
    operands: list[str] = []
    used: set[str] = set()
    i = 0
    while i < len(args):
        word = args[i]
        i += 1
        if word == "--":
            operands += args[i:]
            break
        if not word.startswith("-") or word == "-":
            operands.append(word)
        elif word in spec.words or (spec.numbers and re.fullmatch(r"-\d+", word)):
            used.add(word)
        elif word.startswith("--"):
            name, eq, _ = word.partition("=")
            if name not in spec.valued_words:
                return f"with the option `{word}`"
            if not eq:
                if i >= len(args):
                    return f"with `{word}` but no value"
                i += 1
            used.add(name)
        else:
            for k, letter in enumerate(word[1:], 1):
                if letter in spec.valued:
                    used.add("-" + letter)
                    if k == len(word) - 1:
                        if i >= len(args):
                            return f"with `{word}` but no value"
                        i += 1
                    break
                if letter not in spec.flags:
                    return f"with the option `{word}`"
                used.add("-" + letter)
    return operands, used


def _find(args: Sequence[str]) -> list[str] | str:
    """The starting points of `find args`, or why the expression is not on the list."""
    starts = []
    i = 0
    while i < len(args) and not args[i].startswith("-") and args[i] not in ("!", "(", ")"):
        starts.append(args[i])
        i += 1
    while i < len(args):
        if args[i] in FIND_VALUED and i + 1 < len(args):
            i += 2
        elif args[i] in FIND_PLAIN:
            i += 1
        else:
            return f"with `{args[i]}`"
    return starts or ["."]


def _inside(word: str, workspace: Path) -> str | None:
    """Why the path `word` (relative to the workspace) is not plainly a workspace file now, or None."""
    try:
        real = os.path.realpath(os.path.join(workspace, word))  # links and `..` resolved, as the kernel will
        if not Path(real).is_relative_to(workspace):
            return f"`{word}` resolves outside the workspace"
        info = os.stat(real) if os.path.lexists(real) else None
    except (OSError, ValueError):
        return f"`{word}` cannot be resolved"
    return _unplain(word, info) if info is not None else None


def _unplain(shown: str, info: os.stat_result) -> str | None:
    """Why a file is not one to read unasked (a file named, or one a recursive read opens), or None:
    another hard link may make it any file at all, chatgate's database included; a FIFO hangs the read."""
    if not stat.S_ISDIR(info.st_mode) and info.st_nlink > 1:
        return f"`{shown}` has other hard links (it may be a file from elsewhere)"
    if not (stat.S_ISREG(info.st_mode) or stat.S_ISDIR(info.st_mode)):
        return f"`{shown}` is not a regular file (a FIFO would make the command wait for ever)"
    return None


def _walk(top: str, workspace: Path) -> str | None:
    """Why a read of the whole folder `top` (resolved, in the workspace) could open a file it was not
    named — checked like a file named (`_unplain`) — or None. `grep -r` and git do not follow the
    links they meet in a folder, so neither does this; git's own folder is not read as files."""
    folders, seen = [top], 0
    while folders:
        try:
            entries = list(os.scandir(folders.pop()))
        except OSError:  # (unreadable: the command cannot read it either)
            continue
        for entry in entries:
            seen += 1
            if seen > MAX_WALKED:
                return f"it reads a folder of more than {MAX_WALKED:,} entries, too many to check first"
            try:
                info = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISLNK(info.st_mode) or entry.path == os.path.join(workspace, ".git"):
                continue
            if stat.S_ISDIR(info.st_mode):
                folders.append(entry.path)
            elif why := _unplain(os.path.relpath(entry.path, workspace), info):
                return why
    return None


def _whole_folders(name: str, paths: list[str], used: set[str], workspace: Path) -> str | None:
    """What a recursive read opens beyond its operands, checked: each folder `grep -r` searches (the
    working folder when none is named), and the files `git diff` compares (the working tree)."""
    if name == "grep" and used & {"-r", "--recursive"}:
        tops = [os.path.realpath(os.path.join(workspace, p)) for p in paths or ["."]]
    elif name == "git diff" and not used & {"--cached", "--staged"}:
        tops = [str(workspace)]
    else:
        return None
    for top in tops:
        if os.path.isdir(top) and (why := _walk(top, workspace)):
            return why
    return None


def _program(name: str, workspace: Path) -> str | None:
    """Why `name` might not start the system's program of that name (it finds one in the workspace), or None."""
    entries = [os.path.join(workspace, e or ".") for e in os.environ.get("PATH", os.defpath).split(os.pathsep)]
    found = shutil.which(name, path=os.pathsep.join(entries))  # (relative entries: from the workspace, as bash will)
    if found is None:
        return f"`{name}` is not installed here"
    real = Path(os.path.realpath(found))
    if real.is_relative_to(workspace):
        return f"`{name}` would start {real}, not the system's program"
    return None


def _git_configs(git: Path) -> list[Path]:
    env = os.environ
    home = Path(env.get("HOME") or os.path.expanduser("~"))
    files = [git / "config"]
    if env.get("GIT_CONFIG_GLOBAL"):
        files.append(Path(env["GIT_CONFIG_GLOBAL"]))
    else:
        files += [Path(env.get("XDG_CONFIG_HOME") or home / ".config") / "git" / "config", home / ".gitconfig"]
    if env.get("GIT_CONFIG_SYSTEM"):
        files.append(Path(env["GIT_CONFIG_SYSTEM"]))
    elif not env.get("GIT_CONFIG_NOSYSTEM"):
        files += [Path("/etc/gitconfig"), Path("/usr/local/etc/gitconfig")]
    return files


def git_runs_nothing(workspace: Path) -> str | None:
    """Why `git status/diff/log` in `workspace` could run a program or read another repository, or None.

    Its `.git` must be a real folder in the workspace (not a link, not a `gitdir:` file), with no
    hooks, no other object stores or worktrees, no submodules; and no config it reads (the
    repository's, the user's, the system's) may mention any of `GIT_RISKY`.
    """
    git = workspace / ".git"
    if git.is_symlink() or not git.is_dir():
        return "git here would use a repository that is not a folder `.git` in the workspace"
    if any(os.environ.get(name) for name in GIT_ENV):
        return "git's environment (GIT_DIR, GIT_EXTERNAL_DIFF, GIT_CONFIG_*, …) changes what it runs"
    for extra in ("commondir", "objects/info/alternates", "modules", "worktrees"):
        if os.path.lexists(git / extra):
            return f"the repository has .git/{extra}"
    if os.path.lexists(workspace / ".gitmodules"):
        return "the repository has submodules"
    hooks = git / "hooks"
    if hooks.is_symlink() or (hooks.is_dir() and any(not p.name.endswith(".sample") for p in hooks.iterdir())):
        return "the repository has hooks"
    for path in _git_configs(git):
        try:
            if path == git / "config":  # (beneath the workspace, no link, a regular file: a FIFO cannot hang it)
                if Beneath(workspace).kind(".git/config") not in (None, "file"):
                    return "the repository's config is not a plain file"
                text = Beneath(workspace).read(".git/config", 1 << 20, alone=True).lower()
            else:
                text = path.read_bytes().lower()
        except FileNotFoundError:
            continue
        except Refused as exc:
            return f"the repository's config cannot be read safely ({exc})"
        except OSError:
            return f"{path} cannot be read"
        for word in GIT_RISKY:
            if word in text:
                return f"{path} mentions `{word.decode()}` (git could run a program or read elsewhere)"
    return None


def not_read_only(command: str, workspace: Path, protected: Sequence[Path] = ()) -> str | None:
    """None when `command` only reads the workspace (see the module); otherwise what keeps it off the list.

    `protected`: chatgate's own folders; where one lies inside the workspace, nothing is on the list.
    """
    workspace = Path(os.path.realpath(workspace))
    for folder in protected:
        if Path(os.path.realpath(folder)).is_relative_to(workspace):
            return f"the workspace holds chatgate's own state ({folder})"
    if os.environ.get("BASH_ENV") or any(name.startswith("BASH_FUNC_") for name in os.environ):
        return "bash's environment (BASH_ENV, exported functions) runs code of its own before any command"
    commands = split(command)
    if isinstance(commands, str):
        return commands
    for name, *args in commands:
        spec = COMMANDS.get(name)
        if spec is None:
            return f"`{name}` is not on it"
        if name not in BUILTINS and (why := _program(name, workspace)):
            return why
        if name == "tail" and args and args[0].startswith("+"):
            return f"`tail {args[0]}` (the old form of `tail -n +N`, where a trailing f waits for ever)"
        if spec.operands == "text":
            continue
        parsed: tuple[list[str], set[str]] | str = ([], set())
        if spec.operands == "find":
            paths = _find(args)
        elif spec.operands == "git":
            if not args or args[0] not in GIT:
                return f"`git {args[0] if args else ''}` is not on it (only git status, diff and log)"
            name = f"git {args[0]}"
            parsed = _options(args[1:], GIT[args[0]])
            paths = parsed if isinstance(parsed, str) else git_runs_nothing(workspace) or parsed[0]
        else:
            parsed = _options(args, spec)
            paths = parsed if isinstance(parsed, str) else parsed[0]
            if not isinstance(parsed, str) and spec.operands == "none" and paths:
                paths = "with operands"
            elif not isinstance(parsed, str) and spec.operands == "pattern" and not parsed[1] & {"-e", "--regexp"}:
                paths = paths[1:]  # the first is the pattern
        if isinstance(paths, str):
            return f"`{name}` {paths}" if paths.startswith("with") else paths
        for path in paths:
            if why := _inside(path, workspace):
                return why
        if not isinstance(parsed, str) and (why := _whole_folders(name, paths, parsed[1], workspace)):
            return why
    return None
