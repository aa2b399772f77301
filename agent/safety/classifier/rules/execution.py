"""Programs that run code handed to them in an option, a variable or a little script of their own.

`tar --to-command`, `ssh -o ProxyCommand=`, `rsync -e`, `make --eval`, `vim -c '!…'`, `sed 's/…/…/e'`,
`git -c core.pager=`, `PAGER=… man`, `LD_PRELOAD=…`: each program that takes "a command to run" has one
table entry saying which option carries it and which values are its ordinary, harmless use (`tar -I zstd`,
`rsync -e 'ssh -p 2222'`, `PAGER=cat`). Any other value is dangerous — the option is a way to run a
program that the line does not show as one — and the value is analysed as a command too, so
`tar --checkpoint-action=exec='rm -rf /'` is hardline. Also here: wrappers the guard looks through
(fakeroot, setpriv, unshare, sshpass, bwrap, …) and what running under them means by itself (root in a user
namespace, a changed identity). Debuggers, agent daemons and package environments that start a program:
`launchers`.
"""

from __future__ import annotations

import re
import shlex
from typing import Iterator

from agent.safety.classifier.lazy import lazy_re
from agent.safety.classifier.paths import write_risk
from agent.safety.classifier.vocabulary import DANGEROUS, HARDLINE, Call, Finding, Hit, Recurse, by_name, parse

PAGERS = frozenset("less more most cat bat batcat delta diff-so-fancy pg head tail".split())
EDITORS = frozenset("vi vim nvim nano emacs emacsclient code subl micro kak hx helix ed mcedit gedit kate true "
                    "cat".split())
COMPRESSORS = frozenset("gzip gunzip pigz bzip2 pbzip2 lbzip2 xz pixz zstd pzstd unzstd lz4 lzip plzip lzma lzop "
                        "brotli compress uncompress".split())
SSH_CLIENTS = frozenset("ssh dbclient plink".split())
PROXIES = frozenset("ssh nc ncat netcat socat connect-proxy corkscrew cloudflared proxytunnel".split())
CRED_HELPERS = frozenset("store cache osxkeychain manager manager-core libsecret wincred gnome-keyring".split())

# wrappers (merged into the guard's table): (short options taking a value, long ones, positionals to skip)
EXTRA_WRAPPERS = {
    "fakeroot": ("lsi", ("lib", "faked", "save-file", "load-file"), 0), "eatmydata": ("", (), 0),
    "setpriv": ("", ("reuid", "regid", "ruid", "euid", "rgid", "egid", "groups", "inh-caps", "ambient-caps",
                     "bounding-set", "securebits", "pdeathsig", "selinux-label", "apparmor-profile",
                     "landlock-access", "landlock-rule"), 0),
    "prlimit": ("p", ("pid", "output"), 0), "sshpass": ("pfd", (), 0),
    "unshare": ("SGRw", ("setuid", "setgid", "root", "wd", "propagation", "setgroups", "map-user", "map-group",
                         "map-users", "map-groups", "mount-binfmt", "kill-child"), 0),
    "nsenter": ("tSG", ("target", "setuid", "setgid"), 0), "aa-exec": ("pn", ("profile", "namespace"), 0),
    "firejail": ("", (), 0), "bwrap": ("", (), 0),
    "xvfb-run": ("nsfe", ("server-num", "server-args", "auth-file", "error-file"), 0),
    "dbus-run-session": ("", ("config-file", "dbus-daemon"), 0), "catchsegv": ("", (), 0),
    "systemd-inhibit": ("", ("what", "who", "why", "mode"), 0), "rlwrap": ("", (), 0),
    "script": ("cEIOBT", ("command", "echo", "log-in", "log-out", "log-io", "log-timing", "logging-format"), 0),
    "capsh": ("", (), 0), "torify": ("", (), 0), "tsocks": ("", (), 0), "trickle": ("udw", (), 0),
    # more that run the rest of their line: as root, as another user, under a tool, in a changed environment
    "run0": ("ugD", ("user", "group", "nice", "chdir", "setenv", "property", "slice", "unit", "description",
                     "background", "machine"), 0),
    "sudo-rs": ("ugpChDrtUT", ("user", "group", "prompt", "close-from", "chdir", "other-user", "host"), 0),
    "please": ("cdrtu", (), 0), "pfexec": ("", (), 0), "gosu": ("", (), 1), "su-exec": ("", (), 1),
    "setuidgid": ("", (), 1), "s6-setuidgid": ("", (), 1), "envuidgid": ("", (), 1), "envdir": ("", (), 1),
    "setlock": ("", (), 1), "lckdo": ("w", (), 1), "chpst": ("uUe/nlLmdofcprt", (), 0),
    "softlimit": ("madslfcoprt", (), 0), "chronic": ("", (), 0), "ifne": ("", (), 0), "valgrind": ("", (), 0),
    "setarch": ("", (), 1), "linux32": ("", (), 0), "linux64": ("", (), 0), "logsave": ("", (), 1),
    "ssh-agent": ("aEtP", (), 0), "cpulimit": ("lpePcs", ("limit", "pid", "exe", "path", "cpu", "signal"), 0),
    "dbus-launch": ("", ("config-file", "autolaunch"), 0), "systemd-cat": ("tp", ("identifier", "priority",
                                                                                "stderr-priority"), 0),
    "tini": ("spe", (), 0), "dumb-init": ("r", ("rewrite",), 0), "authbind": ("", (), 0), "fakechroot": ("", (), 0),
    "schroot": ("cudp", ("chroot", "user", "directory"), 0), "multitime": ("nqs", (), 0), "grc": ("c", ("config",), 0),
    "proot": ("rbmwqkRSiv", ("rootfs", "bind", "mount", "pwd", "cwd", "qemu", "kernel-release", "verbose"), 0),
    "cgexec": ("g", (), 0), "nocache": ("n", (), 0), "with-contenv": ("", (), 0), "host-spawn": ("", (), 0),
    "distrobox-host-exec": ("", (), 0), "sem": ("j", ("id", "jobs", "semaphorename", "semaphoretimeout"), 0),
    "ld.so": ("", ("library-path", "preload", "audit", "argv0"), 0),
    "ld-linux.so.2": ("", ("library-path", "preload", "audit", "argv0"), 0),
    "ld-linux-x86-64.so.2": ("", ("library-path", "preload", "audit", "argv0"), 0),
    "ld-linux-aarch64.so.1": ("", ("library-path", "preload", "audit", "argv0"), 0),
    "ld-musl-x86_64.so.1": ("", ("library-path", "preload", "audit", "argv0"), 0),
}
PRIVILEGED = frozenset({"sudo", "doas", "pkexec", "su", "runuser", "run0", "sudo-rs", "please", "pfexec"})
# a wrapper whose use is a risk of its own, whatever it runs
_IDENTITY = lazy_re(r"--(reuid|regid|ruid|euid|rgid|egid|groups|init-groups|keep-groups|inh-caps|ambient-caps"
                    r"|bounding-set|securebits)\b")


DETACHING = frozenset({"nohup", "setsid", "systemd-run", "daemonize", "start-stop-daemon"})
_NOT_ESCAPES = PRIVILEGED | {"su", "exec", "command", "builtin", "sg", "nix-shell", "time", "chroot"}
_INTERACTIVE = frozenset("sh bash zsh dash ksh mksh ash fish csh tcsh rbash yash python python3 perl ruby node php lua "
                         "irb pry tclsh wish expect gdb".split())


def _interactive(argv: list | str | None) -> bool:
    """A shell or interpreter with nothing to run: no script, no -c/-e code, no module."""
    if not isinstance(argv, list) or not argv or argv[0].rsplit("/", 1)[-1].lower() not in _INTERACTIVE:
        return False
    return all(a.startswith("-") and (a.startswith("--") or not set(a[1:]) & set("cemErx")) for a in argv[1:])


def wrapper_hits(name: str, argv: list[str], shown: str = "", inner: list | str | None = None,
                 terminal: bool = False) -> Iterator[Finding]:
    """What running through wrapper `name` means by itself (its command `inner` is judged separately): it detaches,
    changes root, or — on the terminal — starts an interactive shell (the GTFOBins shape `env /bin/sh`, `nice
    bash`, `stdbuf -i0 /bin/sh`: a shell escape, see `escapes`)."""
    args, shown = argv[1:], shown or " ".join(argv)
    if name in DETACHING:
        yield Hit(DANGEROUS, f"starts something that outlives the command ({name})", shown)
    elif name == "chroot":
        yield Hit(DANGEROUS, "runs a command in another root (chroot)", shown)
    if terminal and name not in _NOT_ESCAPES and _interactive(inner):
        yield Hit(DANGEROUS, f"shell escape: {name} starts an interactive shell or interpreter", shown)
    if name == "setpriv" and any(_IDENTITY.match(a) for a in args):
        yield Hit(DANGEROUS, "runs with a changed identity or capabilities (setpriv)", " ".join(argv))
    elif name == "unshare" and any(a in ("-r", "--map-root-user", "-U", "--user", "--map-auto", "--map-current-user")
                                   or re.fullmatch(r"-[a-zA-Z]*[rU][a-zA-Z]*", a) for a in args):
        yield Hit(DANGEROUS, "root inside a new user namespace (unshare): can undo the sandbox's mounts",
                  " ".join(argv))
    elif name == "capsh" and any(re.match(r"--(uid|gid|groups|caps|addamb|inh|user)=", a) for a in args):
        yield Hit(DANGEROUS, "runs with a changed identity or capabilities (capsh)", " ".join(argv))
    elif name == "bwrap":  # it shows (or hides, or maps) what it likes: the command's reach is in its options
        yield Hit(DANGEROUS, "runs a command in a sandbox of its own making (bwrap): what it can reach and do is "
                  "whatever the options say", " ".join(argv))
    elif name == "nsenter":
        yield Hit(DANGEROUS, "entering another process's namespaces (nsenter)", " ".join(argv))
    elif name == "script" and parse(args, "cEIOBT", ("command",)).val("c", "command") is not None:
        yield Hit(DANGEROUS, "runs a command on a new terminal (script -c), the way a check that needs one is "
                  "got around", " ".join(argv))
    elif name in ("strace", "ltrace") and any(a in ("-p", "--attach") or re.fullmatch(r"-p\d+", a) for a in args):
        yield Hit(DANGEROUS, "attaches to a running process (reads or changes its memory)", " ".join(argv))
    elif name == "prlimit" and parse(args, "p", ("pid",)).val("p", "pid"):
        yield Hit(DANGEROUS, "changes the limits of another process (prlimit --pid)", " ".join(argv))
    elif name == "cpulimit" and any(a in ("-p", "--pid") or a.startswith(("-p", "--pid=")) for a in args):
        yield Hit(DANGEROUS, "throttles another process", " ".join(argv))
    elif name.startswith("ld") and any(a.startswith(("--preload", "--audit")) for a in args):
        yield Hit(DANGEROUS, f"{name}: loads code into the program it starts", " ".join(argv))


# bubblewrap's options: those taking two values, and those taking one (--overlay takes three; the others none)
_BWRAP_TWO = frozenset("--bind --bind-try --dev-bind --dev-bind-try --ro-bind --ro-bind-try --symlink --setenv "
                       "--file --bind-data --ro-bind-data --chmod --bind-fd --ro-bind-fd".split())
_BWRAP_ONE = frozenset("--args --argv0 --unsetenv --lock-file --sync-fd --userns --userns2 --pidns --uid --gid "
                       "--hostname --chdir --remount-ro --proc --dev --tmpfs --mqueue --dir --seccomp "
                       "--add-seccomp-fd --info-fd --json-status-fd --block-fd --userns-block-fd --exec-label "
                       "--file-label --cap-add --cap-drop --size --perms --tmp-overlay --ro-overlay "
                       "--overlay-src".split())


def _bwrap_command(args: list[str]) -> list[str]:
    k = 0
    while k < len(args):
        a = args[k]
        if a == "--":
            return args[k + 1:]
        if not a.startswith("--"):
            return args[k:]
        k += 4 if a == "--overlay" else 3 if a in _BWRAP_TWO else 2 if a in _BWRAP_ONE else 1
    return []


def wrapped(name: str, argv: list[str]) -> list[str] | str | None | bool:
    """The command of a wrapper whose syntax the guard's generic parsing does not cover; True: generic."""
    if name == "bwrap":
        return _bwrap_command(argv[1:]) or None
    if name == "capsh":
        return ["bash", *argv[argv.index("--") + 1:]] if "--" in argv else None
    if name == "script":
        return parse(argv[1:], "cEIOBT", ("command",)).val("c", "command")
    if name == "prlimit":  # resource options take their value after '=' or attached
        rest = [a for a in argv[1:] if not (a.startswith("-") and "=" in a)]
        return parse(rest, "p", ("pid", "output"), stop=True).rest or None
    return True


# ---------------------------------------------------------------- a value that is a command

def _program(value: str) -> str:
    try:
        words = shlex.split(value)
    except ValueError:
        words = value.split()
    return words[0].rsplit("/", 1)[-1].lower() if words else ""


def runs(value: str, what: str, shown: str, benign: frozenset = frozenset()) -> Iterator[Finding]:
    """`value` is a command line some program will run: dangerous unless its program is an ordinary one."""
    if _program(value) not in benign:
        yield Hit(DANGEROUS, f"{what}: a command to run, given as a setting", shown)
    yield Recurse("shell", value, what)


# ---------------------------------------------------------------- variables naming programs or code

_PROGRAM_VARS = {
    **dict.fromkeys(("PAGER", "MANPAGER", "GIT_PAGER", "SYSTEMD_PAGER", "PSQL_PAGER", "BAT_PAGER", "DELTA_PAGER"),
                    PAGERS),
    **dict.fromkeys(("EDITOR", "VISUAL", "GIT_EDITOR", "SUDO_EDITOR", "GIT_SEQUENCE_EDITOR", "FCEDIT",
                     "SYSTEMD_EDITOR"), EDITORS),
    **dict.fromkeys(("GIT_SSH_COMMAND", "GIT_SSH", "RSYNC_RSH", "RSH", "BORG_RSH", "RCLONE_SFTP_SSH"), SSH_CLIENTS),
    **dict.fromkeys(("GIT_EXTERNAL_DIFF", "GIT_ASKPASS", "SSH_ASKPASS", "SUDO_ASKPASS", "GIT_PROXY_COMMAND",
                     "GROFF_BIN_PATH", "GIT_EXEC_PATH",
                     "LESSOPEN", "LESSCLOSE", "PROMPT_COMMAND"), frozenset()),
    "BROWSER": frozenset("firefox chromium chromium-browser google-chrome google-chrome-stable brave-browser "
                         "xdg-open open sensible-browser w3m lynx links echo true none".split()),
}
_CODE_VARS = {  # variable -> pattern of the values that load code into every program that reads it
    "LD_PRELOAD": r".", "LD_AUDIT": r".", "DYLD_INSERT_LIBRARIES": r".", "GCONV_PATH": r".", "BASH_ENV": r".",
    "ENV": r".", "NODE_OPTIONS": r"(^|\s)(-r|--require|--import|--loader|--experimental-loader)\b",
    "PERL5OPT": r"-[MmdI]", "RUBYOPT": r"-r", "JAVA_TOOL_OPTIONS": r"-(javaagent|agentpath|agentlib)",
    "_JAVA_OPTIONS": r"-(javaagent|agentpath|agentlib)", "PYTHONWARNINGS": r"::.*\.",
}
_PROMPT_VARS = frozenset({"PS0", "PS1", "PS2", "PS4"})  # bash expands them as prompts (PS4 under `set -x`): $(…) runs
_ASSIGN = lazy_re(r"([A-Za-z_][A-Za-z0-9_]*)=(.*)", re.S)


def assignments(words: list[str], shown: str) -> Iterator[Finding]:
    """`VAR=value` words (before a command, or exported) that name a program to run or load code."""
    for w in words:
        m = _ASSIGN.fullmatch(w)
        if not m:
            continue
        name, value = m.groups()
        if name in _PROGRAM_VARS and value:
            yield from runs(value, f"{name}={value}", shown, _PROGRAM_VARS[name])
        elif name in _CODE_VARS and value and re.search(_CODE_VARS[name], value):
            yield Hit(DANGEROUS, f"{name}: loads code into the programs it starts", shown)
        elif name in _PROMPT_VARS and re.search(r"[$`]", value):  # what it substitutes is judged as it would run
            yield Recurse("shell", 'echo "' + value.replace('"', '\\"') + '"', f"{name} prompt")


def r_export(c: Call) -> Iterator[Finding]:
    yield from assignments([a for a in c.args if not a.startswith("-")], c.shown)


def r_enable(c: Call) -> Iterator[Finding]:
    """`enable -f FILE NAME` loads a builtin from a shared object: its code runs inside the shell."""
    if parse(c.args, "fd").has("f"):
        yield Hit(DANGEROUS, "loads a shell builtin from a shared object (its code runs in the shell)", c.shown)


# ---------------------------------------------------------------- options carrying a command, per program

def _ssh_options(c: Call) -> Iterator[Finding]:
    values = [v for k, a in enumerate(c.args) for v in ([c.args[k + 1]] if a == "-o" and k + 1 < len(c.args) else
                                                          [a[2:]] if a.startswith("-o") and len(a) > 2 else [])]
    for v in values:
        m = re.match(r"(\w+)\s*[= ]\s*(.*)", v.strip(), re.S)
        if not m:
            continue
        key, value = m.group(1).lower(), m.group(2)
        if key in ("proxycommand", "knownhostscommand"):
            yield from runs(value, f"ssh {m.group(1)}", c.shown, PROXIES)
        elif key == "localcommand":
            yield from runs(value, "ssh LocalCommand", c.shown)
        elif key == "remotecommand":  # what `ssh host CMD` would run there: judged at full weight
            yield Recurse("shell", value, "ssh RemoteCommand")
    if c.name in ("scp", "sftp"):
        prog = parse(c.args, "SFPiJloDcBR").val("S", "D")
        if prog:
            yield from runs(prog, f"{c.name} -S", c.shown, SSH_CLIENTS)


def r_ssh_family(c: Call) -> Iterator[Finding]:
    yield from _ssh_options(c)
    if c.name == "ssh":
        o = parse(c.args, "BbcDEeFIiJLlmOopQRSWw")
        if o.vals.get("R"):
            yield Hit(DANGEROUS, "opens a port on another host back into this one (ssh -R)", c.shown)


def r_rsync_exec(c: Call) -> Iterator[Finding]:
    o = parse(c.args, "eTfB", ("rsh", "rsync-path", "exclude", "include", "filter", "temp-dir"))
    rsh = o.val("e", "rsh")
    if rsh:
        yield from runs(rsh, "rsync -e", c.shown, SSH_CLIENTS)


def r_tar_exec(c: Call) -> Iterator[Finding]:
    o = parse(c.args, "ICFfbgHKLNTVX", ("to-command", "checkpoint-action", "use-compress-program", "info-script",
                                         "new-volume-script", "rsh-command", "file", "directory"))
    for opt, benign in (("I", COMPRESSORS), ("use-compress-program", COMPRESSORS), ("to-command", frozenset()),
                        ("info-script", frozenset()), ("new-volume-script", frozenset()),
                        ("rsh-command", SSH_CLIENTS)):
        for v in o.vals.get(opt, []) if len(opt) == 1 else o.longs.get(opt, []):
            yield from runs(v, f"tar {'-' if len(opt) == 1 else '--'}{opt}", c.shown, benign)
    for v in o.longs.get("checkpoint-action", []):
        if v.startswith(("exec=", "exec ")):
            yield from runs(v[5:], "tar --checkpoint-action=exec", c.shown)


def r_make_eval(c: Call) -> Iterator[Finding]:
    o = parse(c.args, "CfIjlEoW", ("eval", "directory", "file", "makefile", "include-dir", "jobs", "load-average",
                                   "old-file", "what-if", "assume-old", "assume-new", "new-file"))
    for text in o.vals.get("E", []) + o.longs.get("eval", []):
        yield Hit(DANGEROUS, "make --eval: a recipe given on the command line", c.shown)
        for line in re.split(r"\n", text):
            recipe = line[1:] if line.startswith("\t") else line.split(";", 1)[1] if ":" in line and ";" in line else ""
            if recipe.strip():
                yield Recurse("shell", recipe.lstrip("@-+ "), "make --eval")


_VIM_RUNS = lazy_re(r"\s*:*\s*(?:[.$%\d,'<>]*\s*!|(?:r|read|w|write)\s*!|sil(?:ent)?!?\s*!|(?:py|python|py3|"
                    r"python3|pyx|pythonx|lua|luado|luafile|perl|ruby|mz|tcl)\b|.*\bsystem\s*\(|ter(?:minal)?\b|"
                    r"sh(?:ell)?\b|.*\bexe(?:cute)?\b|norm(?:al)?!?\s.*!)")


def r_vim(c: Call) -> Iterator[Finding]:
    cmds = [c.args[k + 1] for k, a in enumerate(c.args[:-1]) if a in ("-c", "--cmd")]
    cmds += [a[1:] for a in c.args if a.startswith("+") and len(a) > 1]
    for cmd in cmds:
        if _VIM_RUNS.match(cmd):
            yield Hit(DANGEROUS, f"{c.name} runs a command from its command line", c.shown)
            bang = re.match(r"\s*:*\s*[.$%\d,'<>]*\s*(?:(?:r|read|w|write|sil(?:ent)?!?)\s*)?!(.*)", cmd, re.S)
            if bang and bang.group(1).strip():
                yield Recurse("shell", bang.group(1), f"{c.name} !")


def r_find_writes(c: Call) -> Iterator[Finding]:
    for k, a in enumerate(c.args[:-1]):
        if a in ("-fprint", "-fprint0", "-fprintf", "-fls") and c.args[k + 1] not in ("/dev/stdout", "/dev/stderr",
                                                                                      "/dev/null"):
            risk = write_risk(c.at(c.args[k + 1]))
            yield Hit(risk[0] if risk else DANGEROUS, risk[1] if risk else f"find {a}: writes a file", c.shown)


_SED_ADDR = lazy_re(r"\s*(?:(?:\d+|\$|/(?:\\.|[^/\n])*/I?|\\(.)(?:\\.|.)*?\1)(?:\s*,\s*(?:\d+|\$|/(?:\\.|[^/\n])*/)"
                    r")?(?:~\d+)?\s*!?\s*)?")


def sed_commands(script: str) -> Iterator[tuple[str, str]]:
    """(command letter, its argument) for the sed commands in `script` that run or write: e, w, W, s///e|w."""
    i, n = 0, len(script)
    while i < n:
        m = _SED_ADDR.match(script, i)
        i = m.end() if m else i
        if i >= n:
            break
        ch = script[i]
        if ch == "s" and i + 1 < n:
            d, j, parts = script[i + 1], i + 2, []
            while j < n and len(parts) < 2:
                k = j
                while k < n and script[k] != d:
                    k += 2 if script[k] == "\\" else 1
                parts.append(script[j:k])
                j = k + 1
            fm = re.match(r"[gpIiMm0-9ew]*", script[j:])
            flags = fm.group() if fm else ""
            j += len(flags)
            if "w" in flags:
                target = re.match(r"\s*([^\n;]*)", script[j:])
                yield "w", target.group(1).strip() if target else ""
                j = n if target is None else j + target.end()
            if "e" in flags:
                yield "e", parts[1] if len(parts) > 1 else ""
            i = j
        elif ch in "ewWrR" and (i + 1 == n or script[i + 1] in " \t\n;"):
            end = script.find("\n", i)
            end = n if end < 0 else end
            if ch in "ewW":
                yield ch, script[i + 1:end].strip()
            i = end
        elif ch in "aic":
            end = script.find("\n", i)
            i = n if end < 0 else end
        elif ch in "{}":
            i += 1
        else:
            end = min([p for p in (script.find(";", i), script.find("\n", i)) if p >= 0], default=n)
            i = end + 1
        while i < n and script[i] in " \t\n;":
            i += 1


def r_sed_exec(c: Call) -> Iterator[Finding]:
    o = parse(c.args, "efl", ("expression", "file", "line-length"))
    scripts = o.vals.get("e", []) + o.longs.get("expression", [])
    if not scripts and not o.has("f", "file") and o.pos:
        scripts = [o.pos[0]]
    for script in scripts:
        for cmd, arg in sed_commands(script):
            if cmd == "e":
                yield Hit(DANGEROUS, "sed runs a command (its e command or s///e)", c.shown)
                if arg.strip():
                    yield Recurse("shell", arg, "sed e")
            elif arg not in ("/dev/stdout", "/dev/stderr"):
                risk = write_risk(c.at(arg))
                yield Hit(risk[0] if risk else DANGEROUS, risk[1] if risk else "sed writes a file named in its script",
                          c.shown)


def r_pager_options(c: Call) -> Iterator[Finding]:
    """man -P/-H, zip -TT, less +!cmd, emacs --eval: options whose value is run."""
    if c.name == "man":
        o = parse(c.args, "PHMmSsCLRE", ("pager", "html", "manpath", "sections", "config-file", "locale"))
        for v in o.vals.get("P", []) + o.longs.get("pager", []):
            yield from runs(v, "man -P", c.shown, PAGERS)
        for v in o.vals.get("H", []) + o.longs.get("html", []):
            yield from runs(v, "man -H", c.shown)
    elif c.name == "zip":
        for k, a in enumerate(c.args):
            if a in ("-TT", "--unzip-command") and k + 1 < len(c.args):
                yield from runs(c.args[k + 1], "zip -TT", c.shown, frozenset({"unzip"}))
            elif a.startswith("--unzip-command="):
                yield from runs(a.partition("=")[2], "zip -TT", c.shown, frozenset({"unzip"}))
    elif c.name == "less" and any(a.startswith("+") and "!" in a for a in c.args):
        yield Hit(DANGEROUS, "less runs a command from its command line", c.shown)
    elif c.name in ("emacs", "emacsclient") and any(a in ("--eval", "-eval", "--execute", "-execute", "-e")
                                                    or a.startswith("--eval=") for a in c.args):
        yield Hit(DANGEROUS, f"{c.name} evaluates Lisp given on the command line", c.shown)


def r_powershell(c: Call) -> Iterator[Finding]:
    """PowerShell: an encoded command hides what it runs; a few cmdlets are known by name."""
    o = [x.lower() for x in c.args]
    if any(x in ("-enc", "-e", "-ec", "-encodedcommand", "-encoded") for x in o):
        yield Hit(DANGEROUS, "runs an encoded PowerShell command", c.shown)
    text = " ".join(c.args)
    if re.search(r"\b(Restart|Stop)-Computer\b", text, re.I):
        yield Hit(HARDLINE, "power off / reboot", c.shown)
    elif re.search(r"\b(iex|Invoke-Expression|Invoke-Command|DownloadString|DownloadFile|Start-Process|"
                   r"Invoke-WebRequest|iwr|irm|Invoke-RestMethod|Remove-Item|rm|del|ri|Set-ExecutionPolicy|"
                   r"Add-MpPreference|Set-MpPreference)\b", text, re.I) and "-c" in o or "-command" in o:
        yield Hit(DANGEROUS, "PowerShell that downloads, runs code or deletes", c.shown)


# ---------------------------------------------------------------- git: settings and subcommands that run programs

_GIT_CODE = lazy_re(r"(core\.(fsmonitor|pager|editor|sshcommand|askpass|gitproxy|hookspath)|sequence\.editor"
                    r"|diff\.external|diff\..+\.(textconv|command)|filter\..+\.(clean|smudge|process)"
                    r"|merge\..+\.driver|alias\..+|credential(\..+)?\.helper|include\.path|includeif\..+"
                    r"|uploadpack\.packobjectshook|gpg(\.\w+)?\.program|pager\..+|url\..+\.insteadof"
                    r"|protocol\.ext\.allow)$", re.I)


def _git_setting(key: str, value: str, shown: str) -> Iterator[Finding]:
    k = key.lower()
    if not _GIT_CODE.match(k):
        return
    if k.startswith("alias."):
        if value.startswith("!"):
            yield Hit(DANGEROUS, f"git alias {key} runs a shell command", shown)
            yield Recurse("shell", value[1:], f"git {key}")
        return
    benign = {"core.pager": PAGERS, "core.editor": EDITORS, "sequence.editor": EDITORS, "core.sshcommand": SSH_CLIENTS}
    if k == "core.fsmonitor" and value.lower() in ("", "true", "false", "0", "1"):
        return
    if k.endswith(".helper") and value.split(" ")[0] in CRED_HELPERS or k.startswith("pager.") and (
            value.lower() in ("true", "false", "") or _program(value) in PAGERS):
        return
    if k in benign:
        yield from runs(value, f"git -c {key}", shown, benign[k])
    else:
        yield Hit(DANGEROUS, f"git -c {key}: makes git run a program or fetch from elsewhere", shown)
        if not k.startswith(("url.", "include", "protocol.")):
            yield Recurse("shell", value, f"git -c {key}")


def r_git_exec(c: Call) -> Iterator[Finding]:
    args, k = c.args, 0
    while k < len(args) and args[k].startswith("-"):
        a = args[k]
        if a == "-c" and k + 1 < len(args):
            key, _, value = args[k + 1].partition("=")
            yield from _git_setting(key, value, c.shown)
            k += 1
        elif a in ("-C", "--git-dir", "--work-tree", "--namespace", "--exec-path", "--config-env"):
            k += 1
        k += 1
    rest = args[k:]
    sub = rest[0] if rest else ""
    if sub == "rebase":
        o = parse(rest[1:], "xsXo", ("exec", "strategy", "strategy-option", "onto"))
        for cmd in o.vals.get("x", []) + o.longs.get("exec", []):
            yield Recurse("shell", cmd, "git rebase --exec")
    elif sub == "submodule" and "foreach" in rest:
        tail = [a for a in rest[rest.index("foreach") + 1:] if a not in ("--recursive", "-q", "--quiet")]
        if tail:
            yield Recurse("shell", " ".join(tail), "git submodule foreach")
    elif sub == "bisect" and rest[1:2] == ["run"] and len(rest) > 2:
        yield Recurse("argv", tuple(rest[2:]), "git bisect run")
    if any(a.startswith("ext::") or "ext::" in a.split("=", 1)[-1][:5] for a in rest):
        yield Hit(DANGEROUS, "git ext:: transport runs a command", c.shown)


# ---------------------------------------------------------------- registry

RULES = by_name(
    (("ssh", "scp", "sftp"), r_ssh_family), (("rsync",), r_rsync_exec), (("tar", "gtar", "bsdtar"), r_tar_exec),
    (("make", "gmake"), r_make_eval), (("vim", "vi", "nvim", "ex", "view", "vimdiff", "gvim", "rvim"), r_vim),
    (("find",), r_find_writes), (("sed", "gsed"), r_sed_exec),
    (("man", "zip", "less", "emacs", "emacsclient"), r_pager_options), (("git",), r_git_exec),
    (("export", "declare", "typeset"), r_export), (("pwsh", "powershell", "pwsh-preview"), r_powershell),
    (("enable",), r_enable))
