"""Small models of what shell words and commands produce, for the classifier.

Brace expansion (`/{bin,etc}` is `/bin /etc`); what `find`, `ps`, `pwd` and `dirname` print when
their output feeds another command (`find ~ | xargs rm -rf` removes home; `ps -e | xargs kill -9`
kills every process; `$(dirname $PWD)` is `..`, the directory above the workspace); what `pgrep`,
`pidof` and `lsof -t` print: the ids of processes found by a name or a port, `PIDS_FOUND`.
"""

from __future__ import annotations

import posixpath
import re

from agent.safety.classifier.lazy import lazy_re

SHELLS = frozenset("sh bash zsh dash ksh mksh ash fish csh tcsh rbash yash elvish nu xonsh oksh osh ysh sash hush "
                   "posh".split())
_BRACE = lazy_re(r"\{([^{}]*,[^{}]*)\}")
EVERY_PID = "-1"  # how "every process id" is passed on: kill -1 means every process
PIDS_FOUND = "$(pids…)"  # how "the ids of processes a search found" is passed on (pgrep x | xargs kill)
_FIND_FILTERS = lazy_re(r"-i?(name|path|wholename|regex|lname)$|-(inum|samefile|newer\w*|[acm](time|min)|size|"
                        r"user|group|uid|gid|empty|links|perm|type|xtype|executable|readable|writable|fstype)$")


def expand_braces(args: list[str], limit: int = 64) -> list[str]:
    """Arguments with `a{b,c}d` expanded as bash does (bounded)."""
    out: list[str] = []
    for a in args:
        todo, done = [a], []
        while todo and len(done) + len(todo) < limit:
            w = todo.pop(0)
            m = _BRACE.search(w)
            if not m or "$" in w[:m.start()]:
                done.append(w)
                continue
            todo[:0] = [w[:m.start()] + part + w[m.end():] for part in m.group(1).split(",")]
        out.extend(done + todo)
    return out


def find_output(args: list[str]) -> str | None:
    """What `find ROOTS ...` prints, when it is every path below the roots (no filter): the roots."""
    roots, i = [], 0
    while i < len(args) and args[i] in ("-H", "-L", "-P"):
        i += 1
    while i < len(args) and not args[i].startswith(("-", "(", "!")):
        roots.append(args[i])
        i += 1
    if any(_FIND_FILTERS.match(a) for a in args[i:]) or any(a in ("-exec", "-execdir", "-ok", "-delete", "-quit",
                                                                 "-prune") for a in args[i:]):
        return None
    return "\n".join(roots or ["."])


def find_pattern(args: list[str]) -> str | None:
    """The -name/-iname/-path pattern a `find` selects files by: what `{}` stands for in its -exec."""
    for k, a in enumerate(args[:-1]):
        if a in ("-name", "-iname", "-path", "-ipath", "-wholename"):
            return args[k + 1]
    return None


def dirname(arg: str) -> str:
    """`dirname ARG`: for the working directory ($PWD, an unknown `$(pwd)`), the directory above: `..`."""
    a = arg.rstrip("/")
    if a in ("$PWD", "${PWD}", "$(…)", ".", "") or a.startswith(("$PWD/", "${PWD}/")) and a.count("/") == 1:
        return ".."
    return posixpath.dirname(a) or "."


def lists_every_process(name: str, args: list[str]) -> bool:
    """`ps -e`, `ps aux`, `ps -A`, `pgrep .`: every process on the machine, unfiltered."""
    if name == "ps":
        return any(a in ("-e", "-A", "aux", "ax", "-ax", "-aux", "axu", "-ef", "-eo", "-Ao") or re.fullmatch(
            r"-[a-zA-Z]*[eA][a-zA-Z]*", a) or re.fullmatch(r"[a-z]*ax[a-z]*", a) for a in args)
    if name == "pgrep":
        pats = [a for a in args if not a.startswith("-")]
        return bool(pats) and all(p in (".", ".*", "") for p in pats)
    return False


def keeps_every_line(name: str, args: list[str]) -> bool:
    """A filter that passes every input line on (a column of it): awk '{print $2}', cut, sort, tail -n +2."""
    if name in ("awk", "gawk", "mawk"):
        progs = [a for a in args if not a.startswith("-")]
        return bool(progs) and bool(re.fullmatch(r"\s*(NR\s*>\s*1\s*)?\{\s*print\s+\$\d+\s*;?\s*\}\s*", progs[0]))
    if name in ("cut", "sort", "uniq", "tr", "xargs") and name != "xargs":
        return True
    if name == "tail":
        return any(a.startswith("+") or a.startswith("-n+") for a in args) or "+2" in args
    return False



def searches_processes(name: str, args: list[str], fed_processes: bool = False) -> bool:
    """`pgrep PATTERN`, `pidof NAME`, `lsof -t ...`, or a filter fed a process list (`ps aux | grep x`, and
    `awk '{print $2}'` after it): prints the ids of the processes a search matched."""
    return name in ("pgrep", "pidof") or name == "lsof" and any(re.match(r"-[^-ispucdg:=]*t", a) for a in args) or \
        fed_processes and name in ("grep", "egrep", "fgrep", "rg", "awk", "gawk", "mawk", "cut", "sed", "tr", "sort",
                                   "uniq", "head", "tail")
