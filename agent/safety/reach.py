"""Where a command run without a sandbox would reach, read before it runs: chatgate's own state or not,
and where each of its words leads — what a person is shown, and what a grant of theirs is bound to.

A word is taken both as bash hands it to the program (`agent.safety.shell_words`: quotes removed, `~`
as the home folder, the text of `sh -c` read too) and as the path-like pieces of the raw text (which
also finds a path inside code given to an interpreter). Each is resolved with links and `..` followed,
from the workspace and from every folder another word of the line names (`cd DIR; cat x`, `tar -C DIR
x`, `git -C DIR`: a relative path is read from there); a glob's matches now are resolved too (past
`MAX_MATCHES` of one glob, the command perhaps reaches the state: it asks each time). A word
that leads into a protected folder, or is a regular file that is another name (a hard link) of one of
its files, reaches chatgate's state; so does a workspace folder a word names with such a link or file in
it (a program reading the folder whole may follow it: `tar -h`, `cp -rL`, `find -L`) — a program that
reads a folder whole with none named (`du -L`, `rg x`) names `.`, the workspace. A grant is bound to the
links in the whole workspace too.
"""

from __future__ import annotations

import glob
import hashlib
import itertools
import os
import re
import stat
from pathlib import Path

from agent.safety.beneath import identities
from agent.safety.shell_words import Reading, read
from agent.safety.workspace_code import BUILD_FILES, INTERPRETERS, fingerprint

MAX_MATCHES = 200  # of each glob, resolved
# programs that run code the workspace holds beyond the files the command names (a test runner, a build
# tool, an interpreter importing its modules): a grant for them is bound to every file of the workspace
RUNNERS = INTERPRETERS | frozenset(BUILD_FILES) | frozenset(
    "pytest py.test go jest vitest mocha rspec phpunit ctest meson ninja bazel sbt dotnet mix bundle poetry uv "
    "hatch pdm python2 pip3 pipx ansible-playbook terraform".split())
CACHES = frozenset({".pytest_cache", ".mypy_cache", ".ruff_cache", ".hypothesis"})  # data a run rewrites, not code
MAX_WALKED = 20_000  # entries of a folder read for the links in it
MAX_FOLDERS = 16  # folders named by the line that relative words are also read from
_UP_AND_OUT = re.compile(r"(^|[\s'\"=:<>|;&(])\.\.(/|$|[\s'\";&|)])")  # a path that starts by leaving the workspace
MAX_LINKS = 40  # followed while resolving a path, as the kernel does
_PROCESS_ENTRY = re.compile(r"/proc/(self|thread-self|\d+)/[^/]+")
_PIECES = re.compile(r"[^\s'\"=:,;&|()<>`]+")  # the path-like pieces of a command line, as near as text allows
_HOME_SPELLINGS = re.compile(r"(?:^|(?<=[\s'\"=:(]))(?:~|\$HOME|\$\{HOME\})(?=/|$|[\s'\";&|)])")


def reading(command: str) -> Reading:
    """`command` read as bash will read it, with the HOME its commands get (ours: `command_env` keeps it)."""
    return read(command, os.environ.get("HOME"))


def path_words(command: str, words: Reading) -> list[str]:
    """The words that may be paths: bash's words, the value of each `x=value`/`--option=value` and its
    `:`-separated parts, and the raw text's path-like pieces."""
    found: list[str] = []
    for word in words.words:
        found.append(word)
        if "=" in word:
            value = word.partition("=")[2]
            found += [value, *value.split(":")]
    return list(dict.fromkeys(w for w in [*found, *_PIECES.findall(command)] if w and "\0" not in w))


def _real(base: Path, word: str) -> Path | None:
    try:
        return Path(os.path.realpath(os.path.join(base, word)))
    except (OSError, ValueError):
        return None


def _folders(workspace: Path, words: list[str]) -> list[Path]:
    """The workspace, then the folders the words name (resolved): where a relative word may be read from;
    at most `MAX_FOLDERS` + 1 (one more than that: there were more)."""
    found = [workspace]
    for word in words:
        real = _real(workspace, word)
        if real is not None and real not in found and real.is_dir():
            found.append(real)
            if len(found) > MAX_FOLDERS + 1:
                break
    return found


def _matches(pattern: str, workspace: Path) -> list[str]:
    """What `pattern` matches now, read from the workspace: the first `MAX_MATCHES` + 1 (one more: there were
    more)."""
    return list(itertools.islice(glob.iglob(os.path.join(workspace, pattern)), MAX_MATCHES + 1))


def touches_protected(command: str, workspace: Path, protected: tuple[Path, ...]) -> str | None:
    """A protected folder the command reaches (see the module): by its name (as `~/…` or `$HOME/…` too),
    by `..` out of the workspace, by a word that resolves into it now, or by another name of its file."""
    workspace = Path(os.path.realpath(workspace))
    home = os.environ.get("HOME")
    texts = [command, _HOME_SPELLINGS.sub(home, command) if home else command]
    for folder in protected:
        for text in texts:
            for named in re.findall(re.escape(str(folder)) + r"[^\s'\";&|)]*", text):
                if not Path(os.path.normpath(named)).is_relative_to(workspace):  # (the workspace is fine)
                    return str(folder)
        if workspace.is_relative_to(folder) and _UP_AND_OUT.search(command):
            return f"{folder} (through ..)"
    words = reading(command)
    candidates = path_words(command, words)
    folders = _folders(workspace, candidates)
    state = protected[0] if len(protected) == 1 else "its folders"
    if len(folders) > MAX_FOLDERS + 1:  # (a relative word may be read from one not looked at)
        return f"{state}, perhaps (the command names more than {MAX_FOLDERS} folders, too many to read each of " \
               "its paths from)"
    if why := through_a_process(command, workspace):  # (resolved here, it would be the daemon's folder)
        return f"{state}, perhaps ({why})"
    matched = [_matches(pattern, workspace) for pattern in words.patterns]
    if any(len(matches) > MAX_MATCHES for matches in matched):
        return f"{state}, perhaps (a glob of it matches more than {MAX_MATCHES} names, too many to check each)"
    reached = [(word, real) for word in candidates for base in (folders if not word.startswith("/") else folders[:1])
               if (real := _real(base, word)) is not None]
    reached += [(match, Path(os.path.realpath(match))) for matches in matched for match in matches]
    tops = {top: word for word, top in reversed(reached) if top.is_relative_to(workspace) and top.is_dir()}
    reached += [(f"{os.path.relpath(path, workspace)}, in {word}", Path(real))
                for top, word in tops.items() for path, real, _ in within(top)]
    for word, real in reached:
        if real.is_relative_to(workspace):
            continue
        for folder in protected:
            if real.is_relative_to(folder):
                return f"{folder} (through {word})"
    return _another_name(reached, protected)


def within(top: Path, limit: int = MAX_WALKED) -> list[tuple[str, str, str]]:
    """What in the folder `top` may lead elsewhere, for a program that reads it whole and follows links
    (`tar -h`, `cp -rL`, `find -L`, `du -L`): each link (resolved) and each file that is not plainly its own
    (another hard link, a FIFO…), as (path, resolved path, `kind`), sorted; past `limit` entries, a last
    row saying the rest was not read. Nothing for a file. Links are not followed."""
    found: list[tuple[str, str, str]] = []
    folders, seen = [str(top)], 0
    while folders and os.path.isdir(top):
        try:
            entries = list(os.scandir(folders.pop()))
        except OSError:  # (unreadable: the command cannot read it either)
            continue
        for entry in entries:
            seen += 1
            if seen > limit:
                return [*sorted(found), (str(top), f"more than {limit:,} entries", "not read")]
            path = Path(entry.path)
            if entry.is_dir(follow_symlinks=False):
                folders.append(entry.path)
            elif entry.is_symlink() or kind(path) != "plain":
                found.append((entry.path, os.path.realpath(path), kind(Path(os.path.realpath(path)))))
    return sorted(found)


def through_a_process(command: str, workspace: Path) -> str | None:
    """A word that leads through a process's own entry in /proc (`/proc/self/cwd`, `/dev/fd/…`, a link to
    them): the daemon would resolve it as its own folder or files, the command as its own."""
    workspace = Path(os.path.realpath(workspace))
    candidates = path_words(command, reading(command))
    for base in _folders(workspace, candidates):
        for word in candidates:
            if _enters_a_process(os.path.join(base, word)):
                return f"`{word}` leads through /proc to the folder or files of the process that opens it"
    return None


def out_through_a_link(command: str, workspace: Path) -> str | None:
    """A word naming a path in the workspace that a link there leads out of it (`rc` → ~/.bashrc), or a
    file there with another hard link (perhaps ~/.bashrc itself): the classifier judges a path by its
    name, and this one's name is not where it goes."""
    workspace = Path(os.path.realpath(workspace))
    for word in path_words(command, reading(command)):
        named = Path(os.path.normpath(os.path.join(workspace, word)))
        real = _real(workspace, word)
        if not named.is_relative_to(workspace) or real is None:
            continue
        if not real.is_relative_to(workspace):
            return f"`{word}` leads out of the workspace through a link (to {real})"
        if kind(real) == "linked file":
            return f"`{word}` has other hard links (it may be a file from elsewhere)"
    return None


def _enters_a_process(path: str) -> bool:
    """Whether resolving `path` (links followed one by one, `..` after them) enters /proc/PID/…, with PID
    `self`, `thread-self` or a number, beyond that entry itself."""
    parts, current, hops = list(reversed(Path(path).parts)), "/", 0
    while parts:
        part = parts.pop()
        if part in ("/", ".", ""):
            continue
        if part == "..":
            current = os.path.dirname(current)
            continue
        current = os.path.join(current, part)
        if _PROCESS_ENTRY.match(current):
            return True
        try:
            target = os.readlink(current)
        except (OSError, ValueError):
            continue
        hops += 1
        if hops > MAX_LINKS:
            return False  # a loop: the program's open fails too
        current = "/" if os.path.isabs(target) else os.path.dirname(current)
        parts += reversed(Path(target).parts)
    return False


def _another_name(reached: list[tuple[str, Path]], protected: tuple[Path, ...]) -> str | None:
    """The protected file a word's regular file is another name of (a hard link), if any."""
    own = None
    for word, real in reached:
        try:
            info = os.stat(real)
        except (OSError, ValueError):
            continue
        if stat.S_ISREG(info.st_mode) and info.st_nlink > 1:
            own = identities(protected) if own is None else own
            if (info.st_dev, info.st_ino) in own:
                return f"{protected[0] if len(protected) == 1 else 'its folders'} (through {word}, a hard link " \
                       "to one of its files)"
    return None


def kind(path: Path) -> str:
    """What is at a resolved path, as far as a grant is bound to it: "linked file" (a regular file with
    other hard links: it may be a file from elsewhere), "other" (a FIFO, socket or device) or "plain"
    (a folder, a regular file, or nothing yet — `mkdir build` stays allowed once build exists)."""
    try:
        info = os.lstat(path)
    except (OSError, ValueError):
        return "plain"
    if stat.S_ISREG(info.st_mode) and info.st_nlink > 1:
        return "linked file"
    return "plain" if stat.S_ISREG(info.st_mode) or stat.S_ISDIR(info.st_mode) else "other"


def reach_digest(command: str, workspace: Path, code: list[Path]) -> str:
    """A digest of where the command's words lead now (each resolved path and its `kind`, a glob's
    matches), of the content of the workspace code it runs, and of every link in the workspace: what a
    grant for it is bound to. A file it only names may change, or come to be (`cat notes.txt` stays
    allowed); a link elsewhere, or another hard link, changes this — and for a program that runs the
    workspace's code beyond what it names (`RUNNERS`: `pytest`, `python3 -c 'import mod'`), any change of
    any file in the workspace."""
    workspace = Path(os.path.realpath(workspace))
    words = reading(command)
    leads = [(word, str(real), kind(real)) for word in path_words(command, words)
             if (real := _real(workspace, word)) is not None]
    runs = [(str(path), _content(path, workspace)) for path in code]
    inside = within(workspace)  # a link planted anywhere in it may be followed by a program reading a folder
    if RUNNERS.intersection(os.path.basename(w) for w in words.words):  # it may run any file of the workspace
        inside += [("every file", *_files(workspace))]
    seen = repr((str(workspace), leads, glob_matches(words, workspace), runs, inside)).encode("utf-8", "surrogatepass")
    return hashlib.sha256(seen).hexdigest()


def _files(workspace: Path, limit: int = MAX_WALKED) -> tuple[str, str]:
    """Every file of the workspace as it is now (name, size, change times, identity: a content rewritten
    with its old modification time back still changes its ctime), as one digest, but for the caches of
    data a test run rewrites each time (`CACHES`; `__pycache__` is code and counts); past `limit` entries,
    what was read and that the rest was not."""
    seen, folders, count = hashlib.sha256(), [str(workspace)], 0
    while folders and count <= limit:
        try:
            entries = sorted(os.scandir(folders.pop()), key=lambda e: e.name)
        except OSError:
            continue
        for entry in entries:
            count += 1
            try:
                info = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISDIR(info.st_mode) and entry.name in CACHES:
                continue
            if stat.S_ISDIR(info.st_mode):
                folders.append(entry.path)
            seen.update(repr((entry.path, info.st_mode, info.st_size, info.st_mtime_ns, info.st_ctime_ns,
                              info.st_ino)).encode("utf-8", "surrogatepass"))
    return seen.hexdigest(), "all read" if count <= limit else f"the first {limit:,} entries"


def glob_matches(words: Reading, workspace: Path) -> list[tuple[str, list[tuple[str, str]]]]:
    """Each glob of the command with what it matches now: (resolved path, `kind`), sorted."""
    return [(pattern, sorted((os.path.realpath(m), kind(Path(m))) for m in _matches(pattern, workspace)))
            for pattern in words.patterns]


def _content(path: Path, workspace: Path) -> object:
    """The code a file holds (its kind, size and hash); where it could not be read, its identity."""
    found = fingerprint(path, workspace)
    if found is not None and len(found) == 7 and found[-1] != "not read":
        return found[0], found[3], found[-1]
    return found
