"""Programs that start another with powers of their own: a debugger (gdb runs the program it debugs, and
gdb commands: `shell`, `run ARGS` through a shell, `set args`), an agent daemon (`gpg-agent --daemon CMD`),
a user namespace where the user is root (`podman unshare`, `buildah unshare`), a package environment
(`guix shell -- CMD`, `guix time-machine -- …`, `-e EXPR`). What each runs is judged as if typed; the
option spellings each program accepts (gdb's one-dash long options and unique prefixes, GnuPG's prefixes,
global options before a subcommand) are read the way the program reads them.
"""

from __future__ import annotations

import re
import shlex
from typing import Iterator

from agent.safety.classifier.lazy import lazy_re
from agent.safety.classifier.vocabulary import DANGEROUS, Call, Finding, Hit, Recurse, by_name, parse

_GDB_RUNS = lazy_re(r"\s*(?:!|shell\b|pipe\b|\||python\b|py\b|pi\b|python-interactive\b|guile\b|gu\b|"
                    r".*\bcall\s+(?:\(\w+\)\s*)?(?:system|execve?|popen)\b|source\b)")


# gdb's long options (getopt_long_only: one dash or two, `=value` or the next word, any unique prefix); those
# taking a value, then those taking none
_GDB_VALUED = ("annotate", "se", "symbols", "s", "exec", "e", "core", "c", "pid", "p", "command", "eval-command", "x",
               "ex", "init-command", "init-eval-command", "ix", "iex", "early-init-command",
               "early-init-eval-command", "eix", "eiex", "ui", "interpreter", "i", "directory", "d", "data-directory",
               "D", "cd", "tty", "baud", "b", "l")
_GDB_FLAGS = ("tui", "dbx", "readnow", "r", "readnever", "quiet", "q", "silent", "nh", "nx", "n", "batch-silent",
              "batch", "fullname", "f", "help", "version", "configuration", "nw", "nowindows", "w", "windows",
              "statistics", "write", "args", "return-child-result")
_GDB_EVAL = frozenset({"eval-command", "ex", "init-eval-command", "iex", "early-init-eval-command", "eiex"})
# a gdb command that starts the program (run, r, start, starti), and one that sets what it is given
_GDB_START = lazy_re(r"\s*(?:r|ru|run|start|starti)(?:\s+(.*)|\s*)$", re.S)
_GDB_SET_ARGS = lazy_re(r"\s*set\s+args?(?:\s+(.*)|\s*)$", re.S)
_GDB_FILE = lazy_re(r"\s*(?:file|exec-file|exec|fil|exec-f\w*)\s+(\S.*?)\s*$", re.S)


def _gdb_option(word: str) -> str | None:
    """The gdb option `word` names (`-ex`, `--eval=`, `-eval-comm`: exact, else a unique prefix); None: not one."""
    name = word.lstrip("-").partition("=")[0]
    known = _GDB_VALUED + _GDB_FLAGS
    if name in known:
        return name
    found = {o for o in known if o.startswith(name)} if name else set()
    return found.pop() if len(found) == 1 else None


def _gdb_argv(args: list[str]) -> tuple[list[str], list[str], list[str]]:
    """(commands given with -ex and its kin, positionals, the program and its arguments after --args)."""
    cmds: list[str] = []
    pos: list[str] = []
    k = 0
    while k < len(args):
        a = args[k]
        if a == "--":
            pos += args[k + 1:]
            break
        if a.startswith("-") and len(a) > 1:
            name = _gdb_option(a)
            if name == "args":
                return cmds, pos, args[k + 1:]
            if name in _GDB_VALUED:
                if "=" in a:
                    value = a.partition("=")[2]
                else:
                    k += 1
                    value = args[k] if k < len(args) else ""
                if name in _GDB_EVAL:
                    cmds.append(value)
        else:
            pos.append(a)
        k += 1
    return cmds, pos, []


def r_gdb(c: Call) -> Iterator[Finding]:
    cmds, pos, debugged = _gdb_argv(c.args)
    program, arguments, starts = (debugged[0] if debugged else pos[0] if pos else ""), None, False
    batch = any(a.startswith("-") and _gdb_option(a) in ("batch", "batch-silent") for a in c.args)
    typed: list[str] = []
    if not batch and c.stdin_kind != "":  # it reads commands from its input too (`echo 'shell …' | gdb`)
        if c.stdin is None:
            yield Hit(DANGEROUS, "gdb runs the commands it reads from its input (not shown here)", c.shown)
        else:
            typed = c.stdin.splitlines()
    for k, cmd in enumerate(cmds + typed):
        if _GDB_RUNS.match(cmd):
            yield Hit(DANGEROUS, "gdb runs a command " + ("from its command line" if k < len(cmds) else
                                                          "it reads from its input"), c.shown)
            m = re.match(r"\s*(?:!|shell\s)(.*)", cmd, re.S)
            if m and m.group(1).strip():
                yield Recurse("shell", m.group(1), "gdb shell")
        if m := _GDB_FILE.match(cmd):
            program = m.group(1)
        elif m := _GDB_SET_ARGS.match(cmd):
            arguments = m.group(1) or ""
        elif m := _GDB_START.match(cmd):
            starts = True
            if m.group(1) and m.group(1).strip():
                arguments = m.group(1)
    if any(_gdb_option(a) in ("p", "pid") for a in c.args if a.startswith("-")) or \
            any(a.startswith("-p") and a[2:].isdigit() for a in c.args):
        yield Hit(DANGEROUS, "attaches to a running process (reads or changes its memory)", c.shown)
    if debugged:  # the program it debugs (and runs), as given
        yield Recurse("argv", tuple(debugged), "gdb --args")
    if program and (starts and not debugged or arguments is not None):
        # it starts the program; arguments given in a gdb command reach it through a shell (startup-with-shell)
        line = shlex.quote(program) + (f" {arguments}" if arguments else "")
        yield Recurse("shell", line, "gdb run")


_GPG_AGENT_VALUES = ("homedir", "options", "log-file", "debug-level", "debug", "default-cache-ttl", "max-cache-ttl",
                     "pinentry-program", "scdaemon-program", "default-cache-ttl-ssh", "max-cache-ttl-ssh",
                     "extra-socket", "browser-socket", "ttyname", "ttytype", "display", "lc-ctype", "lc-messages",
                     "xauthority", "pinentry-timeout", "max-passphrase-days", "min-passphrase-len",
                     "min-passphrase-nonalpha", "check-passphrase-pattern", "check-sym-passphrase-pattern",
                     "enable-passphrase-history", "s2k-count", "s2k-calibration", "listen-backlog",
                     "pinentry-formatted-passphrase", "ssh-fingerprint-digest")


def _gpg_spelled(word: str) -> str:
    """A word as GnuPG reads it: a long option (`--dae`, `--homed=x`) by the option it stands for — GnuPG
    takes any unique prefix — with its `=value`; any other word as it is."""
    if not word.startswith("--") or len(word) == 2:
        return word
    name, eq, value = word[2:].partition("=")
    if name in ("daemon", *_GPG_AGENT_VALUES):
        pass
    elif len(name) >= 2 and "daemon".startswith(name):  # (`--d`: debug too; `--da` on is only the daemon)
        name = "daemon"
    elif len(found := {v for v in _GPG_AGENT_VALUES if v.startswith(name)}) == 1:
        name = found.pop()
    return f"--{name}{eq}{value}"


def _subcommand_at(args: list[str], sub: str) -> int | None:
    """Where `sub` is the subcommand of a program with global options before it (`podman --root X unshare`):
    every word before it an option, or a word right after one (it may be that option's value)."""
    for k, a in enumerate(args):
        if a == sub:
            return k
        if a == "--" or not a.startswith("-") and not (k and args[k - 1].startswith("-") and "=" not in args[k - 1]):
            return None
    return None


def r_rootless_unshare(c: Call) -> Iterator[Finding]:
    """`podman unshare`, `buildah unshare` (after any global options): a shell or command as root in the
    user's own namespace."""
    at = _subcommand_at(c.args, "unshare")
    if at is None:
        return
    yield Hit(DANGEROUS, f"root inside a new user namespace ({c.name} unshare): can undo the sandbox's mounts",
              c.shown)
    rest = parse(c.args[at + 1:], "m", ("mount",), stop=True).rest
    if rest:
        yield Recurse("argv", tuple(rest), f"{c.name} unshare")


def r_gpg_agent(c: Call) -> Iterator[Finding]:
    """`gpg-agent --daemon CMD…` (GnuPG takes any unique prefix of an option: `--dae`): a background agent,
    and CMD run under it."""
    end = c.args.index("--") if "--" in c.args else len(c.args)
    args = [_gpg_spelled(a) for a in c.args[:end]] + c.args[end:]
    if "--daemon" not in args:
        return
    yield Hit(DANGEROUS, "starts something that outlives the command (gpg-agent --daemon)", c.shown)
    rest = parse([a for a in args if a != "--daemon"], "", _GPG_AGENT_VALUES, stop=True).rest
    if rest:
        yield Recurse("argv", tuple(rest), "gpg-agent --daemon")


def r_guix(c: Call) -> Iterator[Finding]:
    """`guix shell|environment … -- CMD…` runs CMD; `-e EXPR` there evaluates EXPR (Scheme); `guix time-machine …
    -- CMD…` runs `guix CMD…`."""
    words = [a for a in c.args if not a.startswith("-")]
    cut = c.args.index("--") if "--" in c.args else len(c.args)
    rest = c.args[cut + 1:]
    if words[:1] == ["time-machine"] and rest:
        yield Recurse("argv", ("guix", *rest), "guix time-machine")
    elif words[:1] and words[0] in ("shell", "environment"):
        o = parse(c.args[:cut], "e", ("expression",))
        for v in o.vals.get("e", []) + o.longs.get("expression", []):  # judged as `guile -c` code is
            yield Recurse("code", v, f"guix {words[0]} -e", lang="scheme")
        if rest:
            yield Recurse("argv", tuple(rest), f"guix {words[0]}")


RULES = by_name((("gdb",), r_gdb), (("gpg-agent",), r_gpg_agent), (("podman", "buildah"), r_rootless_unshare),
                (("guix",), r_guix))
