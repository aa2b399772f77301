"""Reading a command line as the shell would: a small lexer that turns text into pipelines of simple commands.

It knows quotes, backslashes, `$'..'`, `$IFS`, variables assigned earlier in the line (and aliases, `set --`,
`read`, `declare -n`), `${x:-default}` and friends, `$(..)`, backticks, `<(..)`, heredocs, here-strings,
redirections and comments. What a substitution prints is asked of the caller (`resolve`), which analyses
the inner text and answers with a `Stream`: its text when known, and whether it was downloaded or decoded.
A simple command comes out as a `Cmd`: its words, redirections, stdin and the streams substituted into it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
import shlex
from typing import Callable, Iterator

from agent.safety.classifier.decode import unescape
from agent.safety.classifier.flow import EVERY_PID
from agent.safety.classifier.vocabulary import ASSIGN

@dataclass
class Stream:
    """What flows through a pipe: its text when known, and whether it was downloaded or decoded."""

    text: str | None = None
    origin: str | None = None  # None | "download" | "decode"
    desc: str = ""  # the producing commands, for reasons
    secret: str | None = None  # what secret it carries (`cat ~/.ssh/id_rsa | ...`, `$(env)`)
    every: bool = False  # every item: without text every process id (`ps -e`), with text every path below it


@dataclass
class Cmd:
    words: list = field(default_factory=list)
    redirs: list = field(default_factory=list)  # (operator, target)
    stdin_text: str | None = None
    stdin_origin: str | None = None
    stdin_set: bool = False
    stdin_desc: str = ""
    subs: list = field(default_factory=list)  # Streams of $(..), `..`, <(..) in this command
    exec_origin: str | None = None  # argv[0] came from downloaded / decoded output
    origins: dict = field(default_factory=dict)  # x=$(curl ..): variable -> origin of its value
    hidden_name: str | None = None  # argv[0] comes from a value the check cannot see ($x unknown, "$@", IFS)
    hidden_code: str | None = None  # ${x@P} of a value the check cannot see: prompt expansion runs what it holds


_OPAQUE_SETTERS = frozenset({"read", "mapfile", "readarray", "getopts"})


def _hashed(args: list) -> tuple[str | None, list]:
    """(PATH, NAMEs) of `hash -p PATH NAME…` (PATH None: no -p, or one without a value)."""
    path, names, options = None, [], True
    rest = iter(args)
    for a in rest:
        if options and a == "--":
            options = False
        elif options and a.startswith("-") and len(a) > 1:
            if "p" in a:
                path = a[a.index("p") + 1:] or next(rest, None)
        else:
            names.append(a)
    return (path, names) if path is not None else (None, [])


def _match(s: str, i: int, open_: str = "(", close: str = ")") -> int:
    """Index of the bracket closing the one opened just before `i` (len(s) if unbalanced)."""
    depth, n = 1, len(s)
    while i < n:
        c = s[i]
        if c == "\\":
            i += 2
            continue
        if c == "'" and open_ == "(":
            j = s.find("'", i + 1)
            i = n if j < 0 else j + 1
            continue
        if c == '"':
            i += 1
            while i < n and s[i] != '"':
                i += 2 if s[i] == "\\" else 1
            i += 1
            continue
        if c == open_:
            depth += 1
        elif c == close:
            depth -= 1
            if depth == 0:
                return i
        i += 1
    return n


class Lexer:
    """Splits shell text into pipelines of simple commands, expanding what it can."""

    def __init__(self, text: str, env: dict, resolve: Callable[[str], Stream]):
        self.s, self.n, self.i = text, len(text), 0
        self.env, self.resolve = env, resolve
        self.out: list = []
        self.pipe: list = []
        self.cmd = Cmd()
        self.cur: list | None = None
        self.quoted = False
        self.redir: str | None = None
        self.heredocs: list = []
        self.after_op = False

    def run(self) -> Iterator[list]:
        s = self.s
        while self.i < self.n:
            if self.out and not self.heredocs:
                yield self.out.pop(0)
            c = s[self.i]
            if c in " \t\r":
                self.end_word()
                self.i += 1
            elif c == "\n":
                self.i += 1
                if self.after_op and not self.heredocs:
                    self.end_word()
                    continue
                self.end_cmd()
                self.end_pipe()
                self.read_heredocs()
            elif c == "#" and self.cur is None:
                j = s.find("\n", self.i)
                self.i = self.n if j < 0 else j
            elif c == "\\":
                nxt = s[self.i + 1:self.i + 2]
                if nxt != "\n":
                    self.add(nxt or "\\", quoted=True)
                self.i += 2
            elif c == "'":
                j = s.find("'", self.i + 1)
                j = self.n if j < 0 else j
                self.add(s[self.i + 1:j], quoted=True)
                self.i = j + 1
            elif c == '"':
                self.i = self.dquote(self.i + 1)
            elif c == "`":
                self.backtick()
            elif c == "$":
                self.dollar(False)
            elif c in ";&|()<>":
                self.operator(c)
            else:
                j = self.i + 1
                while j < self.n and s[j] not in " \t\r\n#\\'\"`$;&|()<>":
                    j += 1
                self.add(s[self.i:j])
                self.i = j
        self.end_cmd()
        self.end_pipe()
        yield from self.out

    def expand_heredoc(self) -> str:
        self.add("", quoted=True)
        self.dquote(0, stop=False)
        return "".join(self.cur or [])

    # words

    def add(self, text: str, quoted: bool = False) -> None:
        if self.cur is None:
            self.cur = []
        self.cur.append(text)
        self.quoted = self.quoted or quoted
        self.after_op = False

    def at_command(self) -> bool:
        """Whether the word being built is in command position (only assignments before it)."""
        return self.redir is None and all(ASSIGN.match(w) for w in self.cmd.words)

    def assigning(self) -> str | None:
        """The variable name when the word being built is an assignment such as `x=$(..)`."""
        m = ASSIGN.match("".join(self.cur or []))
        return m.group().rstrip("+=").split("[")[0] if m and self.at_command() else None

    def insert(self, value: str, quoted: bool) -> None:
        if quoted or self.redir or self.assigning():  # no word splitting in x=$(..)
            self.add(value, quoted=quoted)
            return
        ifs = self.env.get("IFS")
        if ifs and ifs.strip() and self.at_command():  # split by a changed IFS: the name is not what it seems
            self.cmd.hidden_name = self.cmd.hidden_name or f"a word split by IFS={ifs!r}"
        for piece in re.split(r"(\s+)", value):
            if piece and piece.isspace():
                self.end_word()
            elif piece:
                self.add(piece)

    def end_word(self) -> None:
        if self.cur is None:
            return
        w, q = "".join(self.cur), self.quoted
        self.cur, self.quoted = None, False
        if not w and not q:
            return
        if self.redir:
            op, self.redir = self.redir, None
            if op in ("<<", "<<-"):
                self.heredocs.append((self.cmd, w, op == "<<-", q))
            elif op == "<<<":
                self.cmd.stdin_text, self.cmd.stdin_set = w + "\n", True
            else:
                self.cmd.redirs.append((op, w))
                self.cmd.stdin_set = self.cmd.stdin_set or op == "<"
            return
        self.cmd.words.append(w)

    def end_cmd(self) -> None:
        self.end_word()
        self.redir = None
        c = self.cmd
        if c.words or c.redirs or c.stdin_set or c.subs:
            name = next((w for w in c.words if not ASSIGN.match(w)), None)
            if name is not None and self.env.get("opaque hash " + name):
                c.hidden_name = c.hidden_name or f"{name}, which `hash -p` made run a path the check cannot see"
            self.note_assignments(c.words)
            self.pipe.append(c)
        self.cmd = Cmd()

    def end_pipe(self) -> None:
        if self.pipe:
            self.out.append(self.pipe)
        self.pipe = []

    def note_assignments(self, words: list) -> None:
        env = self.env
        if words[:1] == ["alias"]:
            for w in words[1:]:
                name, eq, val = w.partition("=")
                if eq:
                    env["alias " + name] = val
            return
        if words[:1] == ["hash"]:  # hash -p PATH NAME…: each NAME now runs PATH (bash's table of commands)
            self.note_hashed(*_hashed(words[1:]))
            return
        if words[:1] == ["set"] and "--" in words:  # set -- a b c: the positional parameters
            env["@"] = " ".join(words[words.index("--") + 1:])
            return
        if words[:1] and words[0] in _OPAQUE_SETTERS:  # read x, mapfile a, printf -v x: values not seen here
            for w in words[1:]:
                if re.fullmatch(r"[A-Za-z_]\w*", w):
                    env.pop(w, None)
                    env["opaque " + w] = "1"
            return
        if words[:1] == ["unset"]:
            for w in words[1:]:
                env.pop(w, None)
            return
        if words[:1] and words[0] in ("export", "declare", "typeset", "local", "readonly"):
            nameref = any(w.startswith("-") and "n" in w for w in words[1:])
            words = [w for w in words[1:] if not w.startswith(("-", "+"))]
            if nameref:  # declare -n r=x: $r is whatever $x is, which is not tracked
                for w in words:
                    env.pop(w.partition("=")[0], None)
                    env["opaque " + w.partition("=")[0]] = "1"
                return
        if words and all(ASSIGN.match(w) for w in words):
            for w in words:
                name, _, val = w.partition("=")
                if name.endswith("+"):
                    name = name[:-1]
                    val = env.get(name, "") + val
                if re.fullmatch(r"BASH_(CMDS|ALIASES)\[.+\]", name):  # bash's tables of commands and aliases
                    key = name[name.index("[") + 1:-1].strip("'\"")
                    if name.startswith("BASH_CMDS"):
                        self.note_hashed(val, [key])
                    else:
                        env["alias " + key] = val
                name = name.split("[")[0]
                env[name] = val
                if name in self.cmd.origins:
                    env["origin " + name] = self.cmd.origins[name]
                else:
                    env.pop("origin " + name, None)

    def note_hashed(self, path: str | None, names: list) -> None:
        """NAMEs that run `path` from now on (`hash -p`, `BASH_CMDS[NAME]=`): read as aliases of it, or,
        when the check cannot see the path, as command names it cannot see."""
        for name in names:
            if path is None or "$" in path or "…" in path:
                self.env.pop("alias " + name, None)
                self.env["opaque hash " + name] = "1"
            else:
                self.env["alias " + name] = shlex.quote(path)
                self.env.pop("opaque hash " + name, None)

    # quotes and expansions

    def dquote(self, i: int, stop: bool = True) -> int:
        s = self.s
        self.add("", quoted=True)
        while i < self.n:
            c = s[i]
            if c == '"' and stop:
                return i + 1
            if c == "\\" and i + 1 < self.n:
                nxt = s[i + 1]
                self.add(nxt if nxt in "$`\"\\" else "" if nxt == "\n" else "\\" + nxt, quoted=True)
                i += 2
            elif c == "$":
                self.i = i
                self.dollar(True)
                i = self.i
            elif c == "`":
                self.i = i
                self.backtick(True)
                i = self.i
            else:
                j = i + 1
                while j < self.n and s[j] not in '"\\$`':
                    j += 1
                self.add(s[i:j], quoted=True)
                i = j
        return i

    def backtick(self, quoted: bool = False) -> None:
        s, i, buf = self.s, self.i + 1, []
        while i < self.n and s[i] != "`":
            if s[i] == "\\" and i + 1 < self.n and s[i + 1] in "`\\$":
                i += 1
            buf.append(s[i])
            i += 1
        self.i = i + 1
        self.substitute("".join(buf), quoted)

    def dollar(self, quoted: bool) -> None:
        s, i = self.s, self.i
        nx = s[i + 1:i + 2]
        if nx == "'" and not quoted:
            j = i + 2
            while j < self.n and s[j] != "'":
                j += 2 if s[j] == "\\" else 1
            self.add(unescape(s[i + 2:j]), quoted=True)
            self.i = j + 1
        elif nx == '"' and not quoted:
            self.i = self.dquote(i + 2)
        elif s.startswith("$((", i):
            j = _match(s, i + 2)
            self.add(s[i:j + 1], quoted=True)
            self.i = j + 1
        elif nx == "(":
            j = _match(s, i + 2)
            self.i = j + 1
            self.substitute(s[i + 2:j], quoted)
        elif nx == "{":
            j = _match(s, i + 2, "{", "}")
            self.i = j + 1
            self.param(s[i + 2:j], quoted, braced=True)
        elif nx and (nx.isalnum() or nx == "_"):
            m = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|\d").match(s, i + 1)
            self.i = m.end() if m else i + 2
            self.param(m.group() if m else nx, quoted)
        elif nx in ("@", "*"):
            self.i = i + 2
            self.param(nx, quoted)
        elif nx and nx in "#?$!-":
            self.add(s[i:i + 2], quoted=True)
            self.i = i + 2
        else:
            self.add("$")
            self.i = i + 1

    def param(self, expr: str, quoted: bool, braced: bool = False) -> None:
        if braced and expr.endswith("@P"):  # ${x@P}: the value is expanded as a prompt string
            self.prompt(expr[:-2], quoted)
            return
        if expr.startswith("IFS"):  # ${IFS}, $IFS, ${IFS%?}: a word separator
            self.add(" ") if quoted else self.end_word()
            return
        m = re.match(r"[A-Za-z_]\w*|\d+|[@*]", expr)
        if not m or expr.startswith("#"):
            self.add("${" + expr + "}", quoted=True)
            return
        name, rest = m.group(), expr[m.end():]
        val = self.env.get(name)
        naming = self.at_command() and not self.assigning() and not self.redir
        if val is None and (name.isdigit() and name != "0" or name in "@*"):
            val = self.env.get("@", "") if name in "@*" else ""
        literal = "${" + expr + "}" if braced else "$" + name
        # A command name from a value not seen here: set by read/mapfile/declare -n, a lowercase variable
        # this line never set, an array element. (An unset UPPERCASE name is the environment's: $EDITOR.)
        if naming and (rest.startswith("[") or self.env.get("opaque " + name)
                       or val is None and not name.isupper() and name not in "@*"):
            self.cmd.hidden_name = self.cmd.hidden_name or literal
        if rest.startswith(("?", ":?")) or val is None and re.fullmatch(r"%%?/\*?/?", rest):  # ${HOME:?}, ${HOME%/*}
            literal = ".." if name == "PWD" and "*" in rest else "${" + name + "}" + ("/.." if "*" in rest else "")
        elif rest.startswith((":-", "-", ":=", "=")):
            val = val or rest.lstrip(":")[1:]
        elif rest.startswith((":+", "+")):
            val = rest.lstrip(":")[1:] if val else ""
        elif sl := re.fullmatch(r":\s*(-?\d+)(?::\s*(\d+))?", rest):
            if val is None and name in ("PATH", "HOME", "PWD", "SHELL", "OLDPWD") and sl.group(1) == "0":
                val = "/"
            if val is not None:
                start = int(sl.group(1))
                val = val[start:start + int(sl.group(2))] if sl.group(2) else val[start:]
        if val is None:
            self.add(literal, quoted=True)
            return
        if self.env.get("origin " + name) and self.at_command() and not self.assigning():
            self.cmd.exec_origin = self.env["origin " + name]
        elif self.env.get("origin " + name):  # bash -c "$s" after s=$(curl ..): that text is run
            self.cmd.subs.append(Stream(None, self.env["origin " + name], literal))
        if name == "@" and quoted and not self.assigning():  # "$@": one word per parameter
            for k, piece in enumerate(val.split()):
                if k:
                    self.end_word()
                self.add(piece, quoted=True)
            return
        self.insert(val, quoted)

    def prompt(self, expr: str, quoted: bool) -> None:
        """`${x@P}`: bash expands the value of x as it would a prompt — its `$(…)` and backticks run. A value
        this line set is read that way; any other is code the check cannot see."""
        m = re.fullmatch(r"([A-Za-z_]\w*)", expr)
        value = self.env.get(m.group(1)) if m and not self.env.get("opaque " + m.group(1)) else None
        if value is None:
            self.cmd.hidden_code = self.cmd.hidden_code or "${" + expr + "@P}"
            self.add("${" + expr + "@P}", quoted=True)
            return
        self.insert(self.expand(value, self.cmd), quoted)

    def expand(self, text: str, into: Cmd) -> str:
        """`text` expanded as in double quotes (a here-document, a prompt string): what it substitutes is
        analysed, and what is known of that goes with the command `into`."""
        sub = Lexer(text, self.env, self.resolve)
        expanded = sub.expand_heredoc()
        into.subs.extend(sub.cmd.subs)
        into.hidden_code = into.hidden_code or sub.cmd.hidden_code
        return expanded

    def substitute(self, inner: str, quoted: bool) -> None:
        st = self.resolve(inner)
        self.cmd.subs.append(st)
        if self.redir == "<<<" and st.origin:
            self.cmd.stdin_origin = st.origin
        name = self.assigning()
        if st.origin and name:
            self.cmd.origins[name] = st.origin
        elif st.origin and self.at_command():
            self.cmd.exec_origin = st.origin
        if st.text is None and not st.every:
            self.add("$(…)", quoted=True)
        else:
            self.insert(st.text.rstrip("\n") if st.text is not None else EVERY_PID, quoted)

    def operator(self, c: str) -> None:
        s, i = self.s, self.i
        if c in "<>" and s[i + 1:i + 2] == "(":  # process substitution
            j = _match(s, i + 2)
            st = self.resolve(s[i + 2:j])
            if self.redir == "<":  # bash < <(curl ..): the output is stdin
                self.cmd.stdin_text, self.cmd.stdin_origin, self.cmd.stdin_desc = st.text, st.origin, st.desc
            else:
                self.cmd.subs.append(st)
            self.add("/dev/fd/63", quoted=True)
            self.i = j + 1
            return
        if c in "<>":
            if self.cur is not None and "".join(self.cur).isdigit() and not self.quoted:
                self.cur = None  # a file descriptor number such as 2>
            else:
                self.end_word()
            op = next(o for o in ("<<<", "<<-", "<<", "<>", "<&", ">>", ">|", ">&", "<", ">") if s.startswith(o, i))
            self.i = i + len(op)
            if op in ("<&", ">&"):
                m = re.match(r"\s*(?:\d+|-)(?=$|[\s;&|)<>])", s[self.i:])
                if m:
                    self.i += m.end()
                    return
                op = op[0]
            self.redir = op
            return
        if c == "&" and s[i + 1:i + 2] == ">":
            self.end_word()
            self.redir = ">>" if s.startswith("&>>", i) else ">"
            self.i = i + (3 if self.redir == ">>" else 2)
            return
        if c == "(" and self.cur is not None and "".join(self.cur).endswith("="):  # arr=(a b)
            j = _match(s, i + 1)
            self.add(s[i:j + 1])
            self.i = j + 1
            return
        self.end_word()
        self.after_op = c in "|&"
        if c == "(" and s.startswith("((", i):  # arithmetic command
            self.i = _match(s, i + 2) + 2
        elif c == "|" and s[i + 1:i + 2] in ("&", ""):
            self.end_cmd()
            self.i = i + 2
        elif c == "|" and s[i + 1] != "|":
            self.end_cmd()
            self.i = i + 1
        else:
            self.end_cmd()
            self.end_pipe()
            self.i = i + (2 if s[i:i + 2] in ("&&", "||", ";;", ";&") else 1)

    def read_heredocs(self) -> None:
        s = self.s
        for cmd, delim, strip, quoted in self.heredocs:
            lines, i = [], self.i
            while i < self.n:
                j = s.find("\n", i)
                end = self.n if j < 0 else j
                line = s[i:end].lstrip("\t") if strip else s[i:end]
                i = end + 1
                if line == delim:
                    break
                lines.append(line)
            self.i = min(i, self.n)
            body = "\n".join(lines) + "\n" if lines else ""
            if not quoted and ("$" in body or "`" in body):
                body = self.expand(body, cmd)
            cmd.stdin_text, cmd.stdin_set = body, True
        self.heredocs = []
