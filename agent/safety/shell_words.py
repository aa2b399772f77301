"""The words of a command line as bash will hand them to programs, for checking where its paths lead
before it runs without a sandbox — and, where that cannot be known before it runs, why.

The classifier (`agent.safety.classifier`) reads a line for what it does; this reads it for where it
goes. Each word is taken after quote removal, with `~` and `~/…` as the home folder the command gets.
What makes a word mean something that is only known when it runs is named instead (`Reading.unknown`):
an expansion or a substitution (`$x`, `${x@P}`, `$(…)`, backticks, `<(…)`), a `$"…"` string (bash may
translate it), a glob (kept as a pattern as well: the names it matches now can be checked, but it may
match others then; an extended one, `@(…)`, too), a brace expansion, another user's `~` (or HOME set by
the command), a change of folder (`cd`, `pushd`, `popd`: the relative words after it lead elsewhere;
also after `command -p`, `time -p`), `.`/`source` (what it reads may do either), `hash -p` or
`BASH_CMDS[…]=` (a name that then runs another program), `BASH_FUNC_…=` (a function for a bash started
with it), a here-document that expands, a prompt string (`PS4=…`) that runs what it holds, arithmetic on
a name (`((x))`, `let`, `[[ x -eq 0 ]]`, `declare -i`/`-n`, `a[x]`, `printf -v 'a[…]'`: bash expands a
`$(…)` in the value's subscript), a `mapfile -C` callback, a shell whose text xargs or find fills in, a
shell that reads its commands from its input. A word built from an expansion is left out (what it is, is
not known) — but for `$$`, `$!`, `$?`, `$#` and `$-`, which are numbers or flags, never a folder; what a
substitution runs is read as words of its own. The text given to a shell with `-c`, to `eval` or to
`alias` is read the same way, and so is the code of a `trap`; code given to any other interpreter
(`python3 -c`, awk) stays one word: where it goes is not known here. A program that reads a folder whole
with none named (`du -L`, `grep -r x`, `find -L -name x`: `agent.safety.tree_walkers`) reads the current
one: it is taken to name `.`.
"""

from __future__ import annotations

import glob
import os
import re
from dataclasses import dataclass, field

from agent.safety.tree_walkers import NAMES, reads_current_folder

MAX_DEPTH = 8  # shell strings within shell strings
SHELLS = frozenset("sh bash dash zsh ksh mksh ash yash busybox".split())
CHANGES_FOLDER = frozenset({"cd", "pushd", "popd"})
BEFORE_COMMAND = frozenset("! { ( if then else elif do while until time builtin command exec nohup coproc".split())
PROMPTS = frozenset({"PS0", "PS1", "PS2", "PS4"})  # bash expands them (PS4 with `set -x`), running $(…) in them
WRAPPERS = frozenset({"command", "builtin", "time", "exec"})  # which take options before the command
DECLARES = frozenset("declare typeset local export readonly".split())
NAMES_VARIABLES = DECLARES | frozenset("read printf test [ [[ unset wait getopts mapfile readarray let".split())
ARITHMETIC = "arithmetic on a name (`((…))`, `let`, `[[ -eq ]]`, `declare -i`/`-n`, an array subscript: bash runs " \
             "a `$(…)` in the value)"
_ARITHMETIC_TESTS = frozenset("-eq -ne -lt -le -gt -ge".split())
_SUBSCRIPT = re.compile(r"[A-Za-z_]\w*\[(?!\d*\])")  # name[…] with more than a number inside
_SETS_HOME = re.compile(r"HOME(\+?=|$)")
_ASSIGNMENT = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(\[[^]]*\])?\+?=")
_ENDS_WORD = frozenset(" \t\n|&;()<>")
_REDIRECTIONS = ("<<<", "<<-", "&>>", "<<", "<>", "<&", ">>", ">|", ">&", "&>", "<", ">")


@dataclass
class Reading:
    words: list[str] = field(default_factory=list)  # every word whose text is known, quotes removed
    patterns: list[str] = field(default_factory=list)  # the words that are globs, as `glob.glob` patterns
    unknown: list[str] = field(default_factory=list)  # why some words are only known when it runs

    def why(self, what: str) -> None:
        if what not in self.unknown:
            self.unknown.append(what)


@dataclass
class _Command:
    words: list[str] = field(default_factory=list)
    inputs: list[str] = field(default_factory=list)  # the here-documents it reads


def read(command: str, home: str | None) -> Reading:
    """The words of `command` (see the module); `home` is the HOME the command gets (None: `~` unknown)."""
    reading = Reading()
    _Reader(command, home, reading, 0).run()
    return reading


def matching(text: str, i: int, opening: str = "(", closing: str = ")") -> int:
    """The index of the bracket that closes the one opened just before `i`, quotes skipped (len: none)."""
    depth = 1
    while i < len(text):
        c = text[i]
        if c == "\\":
            i += 2
            continue
        if c in "'\"":
            end = text.find(c, i + 1)
            while c == '"' and end > 0 and text[end - 1] == "\\":
                end = text.find(c, end + 1)
            i = len(text) if end < 0 else end + 1
            continue
        depth += (c == opening) - (c == closing)
        if depth == 0:
            return i
        i += 1
    return len(text)


def _command_at(words: list[str]) -> int:
    """Where the command's name is: after assignments, keywords and wrappers with their options
    (`command -p cd`, `time -p`, `exec -a NAME`)."""
    k = 0
    while k < len(words) and (words[k] in BEFORE_COMMAND or _ASSIGNMENT.match(words[k]) or words[k] == "function"):
        wrapper = words[k] in WRAPPERS
        k += 2 if words[k] == "function" else 1  # `function f { cd; }`: its body's first command
        while wrapper and k < len(words) and words[k].startswith("-") and len(words[k]) > 1:
            k += 2 if words[k] == "-a" else 1
    return k


class _Reader:
    def __init__(self, text: str, home: str | None, out: Reading, depth: int) -> None:
        self.s, self.i, self.home, self.out, self.depth = text, 0, home, out, depth
        self.word: list[str] | None = None  # the word being read, quotes removed
        self.pattern: list[str] = []  # the same as a glob pattern: quoted characters escaped
        self.globbed = self.quoted = self.opaque = False
        self.bracket = self.brace = -1  # where an unquoted `[` / `{` is in the word
        self.redirect = ""  # "" | "path" | "<<" | "<<-": what the next word is
        self.command = _Command()
        self.commands: list[_Command] = []  # of the current line (their here-documents follow it)
        self.heredocs: list[tuple[_Command, str, bool, bool]] = []  # (reader, delimiter, expands, strip tabs)

    def run(self) -> None:
        s = self.s
        while self.i < len(s):
            c = s[self.i]
            if c in " \t":
                self.end_word()
                self.i += 1
            elif c == "\n":
                self.end_line()
            elif c == "#" and self.word is None:
                end = s.find("\n", self.i)
                self.i = len(s) if end < 0 else end
            elif c == "\\":
                if s[self.i + 1:self.i + 2] != "\n":
                    self.add(s[self.i + 1:self.i + 2] or "\\", quoted=True)
                self.i += 2
            elif c == "'":
                end = s.find("'", self.i + 1)
                end = len(s) if end < 0 else end
                self.add(s[self.i + 1:end], quoted=True)
                self.i = end + 1
            elif c == '"':
                self.double_quoted(self.i + 1)
            elif c == "$" and s[self.i + 1:self.i + 2] == '"':  # a string bash translates: its words, and asks
                self.out.why('`$"…"` (translated when it runs)')
                self.i += 1
            elif c in "$`":
                self.expansion()
            elif c in "<>" and s[self.i + 1:self.i + 2] == "(":
                end = matching(s, self.i + 2)
                self.nested(s[self.i + 2:end], "a process substitution `<(…)`")
                self.i = end + 1
            elif c == "(" and self.word and self.word[-1] in "@+!?*":  # `@(a|b)`: a glob with `shopt -s extglob`
                end = matching(s, self.i + 1)
                self.out.why(f"an extended glob (`{''.join(self.word)}{s[self.i:end + 1]}`: the names it matches "
                             "when it runs)")
                self.add(s[self.i:end + 1], quoted=True)
                self.i = end + 1
            elif c == "[" and self.subscript_here():  # `a[1<<2]=5`: one word to bash, `<<` and spaces too
                end = matching(s, self.i + 1, "[", "]")
                self.out.why(ARITHMETIC)
                self.add(s[self.i:end + 1], quoted=True)
                self.i = end + 1
            elif c in "|&;()<>":
                self.operator()
            elif c == "~" and self.tilde_here():
                self.tilde()
            else:
                self.add(c, quoted=False)
                self.i += 1
        self.end_line()

    # -- words ------------------------------------------------------------------------------

    def add(self, text: str, *, quoted: bool) -> None:
        if self.word is None:
            self.word, self.pattern = [], []
        self.quoted = self.quoted or quoted
        for c in text:
            if not quoted and c in "*?":
                self.globbed = True
            elif not quoted and c == "[":
                self.bracket = len(self.word)
            elif not quoted and c == "]" and self.bracket >= 0:
                self.globbed = True
            elif not quoted and c == "{":
                self.brace = len(self.word)
            elif not quoted and c == "}" and self.brace >= 0:
                inside = "".join(self.word[self.brace + 1:])
                if "," in inside or ".." in inside:
                    self.out.why("a brace expansion `{…,…}`")
            self.word.append(c)
            self.pattern.append(glob.escape(c) if quoted else c)

    def end_word(self) -> None:
        if self.word is None:
            return
        word, pattern, globbed, quoted, opaque = "".join(self.word), "".join(self.pattern), self.globbed, \
            self.quoted, self.opaque
        self.word, self.globbed, self.quoted, self.opaque, self.bracket, self.brace = None, False, False, False, -1, -1
        redirect, self.redirect = self.redirect, ""
        if redirect in ("<<", "<<-"):
            self.heredocs.append((self.command, word, not quoted, redirect == "<<-"))
            return
        if opaque:
            return
        self.out.words.append(word)
        if word.startswith("BASH_FUNC_") and "=" in word:  # a function a bash started with it defines and runs
            self.out.why("`BASH_FUNC_…=` (a function given to a shell through its environment)")
            self.script(word.partition("=")[2])
        if _SETS_HOME.match(word):  # `HOME=/x`, `export HOME=…`, `read HOME`, `env HOME=… bash -c '~'`
            self.out.why("HOME set by the command (`~` then leads elsewhere)")
        if globbed:
            self.out.patterns.append(pattern)
            self.out.why(f"a glob (`{word}`: the names it matches when it runs)")
        if not redirect:
            self.command.words.append(word)

    def subscript_here(self) -> bool:
        """A `[` bash reads to its `]` as a subscript: after a name where an assignment may stand (first in a
        command, or after assignments), with its `]` in the text."""
        return self.word is not None and not self.quoted and not self.redirect \
            and re.fullmatch(r"[A-Za-z_]\w*", "".join(self.word)) is not None \
            and all(w in BEFORE_COMMAND or _ASSIGNMENT.match(w) for w in self.command.words) \
            and matching(self.s, self.i + 1, "[", "]") < len(self.s)

    def tilde_here(self) -> bool:
        """An unquoted `~` bash expands: at a word's start, or after `=` or `:` in an assignment."""
        if self.word is None:
            return True
        so_far = "".join(self.word)  # (bash reads `make DESTDIR=~/x` so too, outside POSIX mode)
        return bool(_ASSIGNMENT.match(so_far)) and so_far[-1:] in ("=", ":")

    def tilde(self) -> None:
        end = self.i + 1
        while end < len(self.s) and self.s[end] not in _ENDS_WORD and self.s[end] not in "/'\"\\$`":
            end += 1
        prefix = self.s[self.i:end]
        if prefix == "~" and self.home:
            self.add(self.home, quoted=True)
        else:
            self.out.why(f"`{prefix}` (a home or folder not known before it runs)")
            self.add(prefix, quoted=True)
        self.i = end

    def double_quoted(self, i: int) -> None:
        s = self.s
        self.add("", quoted=True)
        while i < len(s) and s[i] != '"':
            if s[i] == "\\" and i + 1 < len(s):
                nxt = s[i + 1]
                self.add(nxt if nxt in '$`"\\' else "" if nxt == "\n" else "\\" + nxt, quoted=True)
                i += 2
            elif s[i] in "$`":
                self.i = i
                self.expansion()
                i = self.i
            else:
                self.add(s[i], quoted=True)
                i += 1
        self.i = i + 1

    def expansion(self) -> None:
        """At `$` or a backtick: what it expands to is known only when it runs (what it runs is read)."""
        s, i = self.s, self.i
        nxt = s[i + 1:i + 2] if s[i] == "$" else "`"
        if nxt == "`":
            end = i + 1
            while end < len(s) and s[end] != "`":
                end += 2 if s[end] == "\\" else 1
            self.nested(re.sub(r"\\([`\\$])", r"\1", s[i + 1:end]), "backticks (a command substitution)")
            self.i = end + 1
        elif nxt == "[":  # `$[…]`: the old spelling of `$((…))`
            end = matching(s, i + 2, "[", "]")
            self.nested(s[i + 2:end], "an arithmetic expansion `$[…]`")
            self.i = end + 1
        elif s.startswith("$((", i):
            end = matching(s, i + 3)
            self.nested(s[i + 3:end], "an arithmetic expansion `$((…))`")
            self.i = min(end + 2, len(s))
        elif nxt == "(":
            end = matching(s, i + 2)
            self.nested(s[i + 2:end], "a command substitution `$(…)`")
            self.i = end + 1
        elif nxt == "{":
            end = matching(s, i + 2, "{", "}")
            inner = s[i + 2:end]
            self.out.why("`${…@P}` (prompt expansion runs the commands in the value)" if "@P" in inner
                          else f"a variable (`${{{inner[:40]}}}`)")
            self.opaque = True
            self.add("", quoted=True)
            self.i = end + 1
        elif nxt == "'":
            self.out.why("`$'…'` (escapes decoded when it runs)")
            end = i + 2
            while end < len(s) and s[end] != "'":
                end += 2 if s[end] == "\\" else 1
            self.opaque = True
            self.add("", quoted=True)
            self.i = end + 1
        elif nxt and nxt in "$!?#-":  # a process id, a status, a count or the shell's flags: never a folder
            self.add("0", quoted=True)
            self.i = i + 2
        elif nxt and (nxt.isalnum() or nxt in "_@*"):
            name = re.match(r"[A-Za-z_]\w*|.", s[i + 1:]).group()  # type: ignore[union-attr]
            self.out.why(f"a variable (`${name}`)")
            self.opaque = True
            self.add("", quoted=True)
            self.i = i + 1 + len(name)
        else:
            self.add("$", quoted=True)
            self.i = i + 1

    def nested(self, text: str, what: str) -> None:
        """A substitution: its value is not known (the word it is in is left out), what it runs is read."""
        self.out.why(what)
        self.opaque = True
        self.add("", quoted=True)
        self.script(text)

    def script(self, text: str) -> None:
        if self.depth >= MAX_DEPTH:
            self.out.why("shell text nested too deeply to read")
            return
        _Reader(text, self.home, self.out, self.depth + 1).run()

    # -- commands and lines -----------------------------------------------------------------

    def operator(self) -> None:
        s, i = self.s, self.i
        if s[i] in "<>" or s.startswith(("&>", "&>>"), i):
            if self.word is not None and "".join(self.word).isdigit() and not self.quoted:
                self.word = None  # the file descriptor of `2>`
            self.end_word()
            op = next(o for o in _REDIRECTIONS if s.startswith(o, i))
            self.i = i + len(op)
            duplicated = re.match(r"\s*(\d+|-)(?=$|[\s;&|)<>])", s[self.i:]) if op in ("<&", ">&") else None
            if duplicated:  # 2>&1: no file
                self.i += duplicated.end()
            else:
                self.redirect = op if op in ("<<", "<<-") else "path"
            return
        if s.startswith("((", i):
            self.out.why(ARITHMETIC)
        self.end_word()
        self.end_command()
        self.i = i + (2 if s[i:i + 2] in ("&&", "||", ";;", "|&", ";&") else 1)

    def end_command(self) -> None:
        self.end_word()
        if self.command.words:
            self.commands.append(self.command)
        self.command = _Command()

    def end_line(self) -> None:
        """At a line's end: its here-documents (the lines after it), then what its commands mean."""
        self.end_command()
        self.i += 1
        for reader, delimiter, expands, strip in self.heredocs:
            lines = []
            while self.i < len(self.s):
                end = self.s.find("\n", self.i)
                end = len(self.s) if end < 0 else end
                line = self.s[self.i:end].lstrip("\t") if strip else self.s[self.i:end]
                self.i = end + 1
                if line == delimiter:
                    break
                lines.append(line)
            body = "\n".join(lines)
            if expands and re.search(r"[$`]", body):
                self.out.why("a here-document with `$` or backticks (expanded when it runs)")
            reader.inputs.append(body)
        self.heredocs = []
        for command in self.commands:
            self.judge(command)
        self.commands = []

    def judge(self, command: _Command) -> None:
        """What a simple command changes about how the words around it are read."""
        words = command.words
        k = _command_at(words)
        for word in words[:k]:
            if assigned := _ASSIGNMENT.match(word):
                self.assignment(assigned.group(1), word, word[assigned.end():])
        if k == len(words):
            return
        name, args = os.path.basename(words[k]), words[k + 1:]
        if name in CHANGES_FOLDER:
            self.out.why(f"`{name}` (the relative paths after it lead elsewhere)")
        elif name == "hash" and any(a.startswith("-") and "p" in a for a in args):
            self.out.why("`hash -p` (a name then runs another program)")
        elif name in ("eval", "trap"):  # trap's first word is code run later (at a signal, an exit, each command)
            self.script(" ".join(args) if name == "eval" else next((a for a in args if a != "--"), ""))
        elif name == "alias":
            for definition in args:
                self.script(definition.partition("=")[2])
        elif name in (".", "source"):
            self.out.why(f"`{name}` (the commands it reads may change folder or run what is not read here)")
        self.evaluates(name, args)
        self.reads_here(words[k:])
        for at in range(k, len(words)):  # a shell, started directly or by another program (sudo, xargs, find)
            if os.path.basename(words[at]) in SHELLS:
                if at > k and (name == "xargs" and any(a.startswith(("-I", "-i", "--replace")) for a in args)
                               or any("{}" in w for w in words[at + 1:])):
                    self.out.why(f"`{name}` filling in the text of a shell when it runs")
                self.shell(words[at + 1:], command.inputs if at == k else None)
                break

    def reads_here(self, words: list[str]) -> None:
        """A program that reads a folder whole, given none, reads the current one: it is taken to name `.`
        (the first such program of the command decides, run directly or by another: `sudo du -L`)."""
        for at, word in enumerate(words):
            name = os.path.basename(word)
            if name in NAMES:
                if reads_current_folder(name, words[at + 1:]):
                    self.out.words.append(".")
                return

    def evaluates(self, name: str, args: list[str]) -> None:
        """Builtins that evaluate a name's value as arithmetic (where `a[$(…)]` runs), or run a callback."""
        options = [a for a in args if a.startswith("-")]
        if name == "let" or (name == "[[" and _ARITHMETIC_TESTS.intersection(args)) or (
                name in DECLARES and any(set(o[1:]) & {"i", "n"} for o in options)):
            self.out.why(ARITHMETIC)
        elif name in ("mapfile", "readarray") and any("C" in o for o in options):
            self.out.why(f"`{name} -C` (runs its callback)")
        names = args[args.index("-v") + 1:][:1] if name == "printf" and "-v" in args else args
        if name in NAMES_VARIABLES and any(_SUBSCRIPT.match(a) for a in names):
            self.out.why(ARITHMETIC)

    def shell(self, args: list[str], inputs: list[str] | None) -> None:
        """`sh -c TEXT` is read; a shell run directly with no script reads its input (here-documents are read)."""
        flags, operand, rest = "", None, iter(args)
        for word in rest:
            if word in ("-o", "+o", "-O", "+O", "--rcfile", "--init-file"):
                next(rest, None)
            elif word.startswith("--"):
                continue
            elif word[:1] in "-+" and len(word) > 1:
                flags += word[1:]
            else:
                operand = word
                break
        if "c" in flags:
            if operand is not None:
                self.script(operand)
        elif inputs is not None and (operand is None or "s" in flags):
            for body in inputs:
                self.script(body)
            if not inputs:
                self.out.why("a shell reading its commands from its input")

    def assignment(self, name: str, word: str, value: str) -> None:
        if _SUBSCRIPT.match(word) and not word.startswith("BASH_CMDS["):
            self.out.why(ARITHMETIC)
        if word.startswith("BASH_CMDS["):
            self.out.why("`BASH_CMDS[…]=` (a name then runs another program)")
        elif name in PROMPTS and re.search(r"[$`]", value):
            self.out.why(f"`{name}=` with `$` or backticks (bash runs what a prompt string holds)")
            self.script('"' + value.replace('"', '\\"') + '"')  # read as bash expands it: as if in double quotes
