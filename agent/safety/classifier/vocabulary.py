"""The classifier's shared vocabulary: what a rule is given and what it answers.

The analysis (`verdict`) turns a command line into simple commands: a `Call` each (argv with quotes,
wrappers and obfuscation removed). A rule looks at one `Call` and yields `Hit`s (a level and a reason)
or `Recurse` requests (a nested shell string, argv, code snippet or SQL text that the analysis must
read too). Also here: GNU-style option parsing (`parse`), sizes such as `100G` (`size_bytes`) and the
shape of an assignment word (`ASSIGN`), and `by_name`, which files rules under the commands they judge.
Nothing here raises on odd input.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator, Union

from agent.safety.classifier.lazy import lazy_re

SAFE, DANGEROUS, HARDLINE = 0, 1, 2


@dataclass(frozen=True)
class Hit:
    level: int
    rule: str
    part: str


@dataclass(frozen=True)
class Recurse:
    kind: str  # "shell" | "argv" | "code" | "sql"
    payload: Union[str, tuple]
    via: str
    lang: str = ""
    cap: int = HARDLINE  # e.g. a command inside a container is never worse than dangerous
    bulk: bool = False  # find -exec / xargs: every delete or chmod acts on many files


Finding = Union[Hit, Recurse]


@dataclass
class Call:
    """One simple command as the rules see it."""

    name: str  # lower-cased basename of argv[0]
    args: list[str]
    shown: str  # the command as shown in reasons
    raw0: str = ""  # argv[0] as written
    bulk: bool = False
    stdin: str | None = None  # literal stdin (heredoc, here-string, echo | ...), if known
    cwd: str | None = None  # working directory, when an earlier `cd` made it known
    root: bool = False  # runs with root privileges: through sudo, doas, su, pkexec, runuser, or ssh root@
    stdin_kind: str = "unknown"  # "" when stdin is the terminal (nothing piped, redirected or written into it)
    memo: dict = field(default_factory=dict)  # what earlier commands of the same line left (git remotes added)

    def at(self, path: str) -> str:
        """`path` resolved against the known working directory."""
        if self.cwd and path and not path.startswith(("/", "~", "$")):
            return posixpath.join(self.cwd, path)
        return path


# ---------------------------------------------------------------- option parsing

@dataclass
class Opts:
    flags: set = field(default_factory=set)
    vals: dict = field(default_factory=dict)  # short option -> [values]
    longs: dict = field(default_factory=dict)  # long option -> [values]
    pos: list = field(default_factory=list)
    rest: list = field(default_factory=list)  # with stop=True: args from the first positional on

    def has(self, *names: str) -> bool:
        return any((n in self.flags) if len(n) == 1 else (n in self.longs) for n in names)

    def val(self, *names: str) -> str | None:
        for n in names:
            got = self.vals.get(n) if len(n) == 1 else self.longs.get(n)
            if got:
                return got[-1]
        return None


def parse(args: list[str], short: str = "", long: tuple = (), stop: bool = False) -> Opts:
    """GNU-style option parsing. `short`: letters taking a value; `long`: long names taking a value."""
    o = Opts()
    i = 0
    while i < len(args):
        a = args[i]
        if a == "--":
            o.pos.extend(args[i + 1:])
            o.rest = args[i + 1:]
            break
        if a.startswith("--") and len(a) > 2:
            k, eq, v = a[2:].partition("=")
            if not eq and k in long and i + 1 < len(args):
                i += 1
                v = args[i]
            o.longs.setdefault(k, []).append(v)
        elif a.startswith("-") and len(a) > 1:
            for j, ch in enumerate(a[1:], start=2):
                o.flags.add(ch)
                if ch in short:
                    v = a[j:]
                    if not v and i + 1 < len(args):
                        i += 1
                        v = args[i]
                    o.vals.setdefault(ch, []).append(v)
                    break
        elif stop:
            o.rest = args[i:]
            o.pos.extend(args[i:])
            break
        else:
            o.pos.append(a)
        i += 1
    return o


# ---------------------------------------------------------------- sizes and assignments

_SIZE = lazy_re(r"^(\d+(?:\.\d+)?)([kmgtpe]?)(?:i?b)?$", re.I)


def size_bytes(text: str) -> float | None:
    """'100G' → bytes (powers of 1024), None when it is not a size."""
    m = _SIZE.match(text.strip())
    if not m:
        return None
    return float(m.group(1)) * 1024 ** ("kmgtpe".index(m.group(2).lower()) + 1 if m.group(2) else 0)


ASSIGN = lazy_re(r"[A-Za-z_][A-Za-z0-9_]*(?:\[[^\]]*\])?\+?=")  # x=, x+=, a[1]= (a word that assigns)


# ---------------------------------------------------------------- rules by command name

Rule = Callable[[Call], Iterator[Finding]]


def by_name(*groups: tuple[Iterable[str], Rule]) -> dict[str, tuple[Rule, ...]]:
    """{command name: its rules, in the order given} from (names, rule) pairs."""
    table: dict[str, tuple[Rule, ...]] = {}
    for names, rule in groups:
        for name in names:
            table[name] = table.get(name, ()) + (rule,)
    return table
