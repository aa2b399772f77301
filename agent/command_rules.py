"""Rules over normalised commands, used by `agent.command_guard`.

The guard turns a command line into simple commands (argv with quotes, wrappers and
obfuscation removed). Each rule here looks at one of them and yields `Hit`s (a level and a
reason) or `Recurse` requests (a nested shell string, argv, code snippet or SQL text that the
guard must analyse too). Nothing in this module raises on odd input: every parser degrades to
"no finding". Git, system administration, publishing, database clients and downloads: `command_rules_tools`.
"""

from __future__ import annotations

import os
import posixpath
import re
from dataclasses import dataclass, field
from typing import Callable, Iterator, Union

from agent.command_flow import PIDS_FOUND, find_pattern

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


# ---------------------------------------------------------------- paths

_HOMES: dict = {}


def _home() -> str:
    """The home directory, as `~` expands (recomputed whenever $HOME changes)."""
    key = os.environ.get("HOME")
    if key not in _HOMES:
        _HOMES.clear()
        _HOMES[key] = os.path.expanduser("~").rstrip("/") or "/"
    return _HOMES[key]


def norm_path(p: str) -> str:
    """Canonical form: `~` for the home directory, no `//`, `.` or `..`, no trailing slash."""
    p = p.strip()
    if not p:
        return p
    for var in ("${HOME}", "$HOME"):
        if p == var or p.startswith(var + "/"):
            p = "~" + p[len(var):]
            break
    home = _home()
    if home != "/" and (p == home or p.startswith(home + "/")):
        p = "~" + p[len(home):]
    if p.startswith("~"):
        head, _, rest = p.partition("/")
        r = posixpath.normpath(rest) if rest else "."
        if r == ".":
            return head
        return "/" if r.startswith("..") else head + "/" + r
    if p.startswith("/"):
        return posixpath.normpath("/" + p.lstrip("/"))
    return posixpath.normpath(p)


_GLOB = re.compile(r"[*?\[]")
CRITICAL = frozenset("""/ ~ /bin /boot /dev /etc /home /lib /lib32 /lib64 /opt /proc /root /sbin /srv /sys
    /usr /var /usr/bin /usr/lib /usr/local /usr/sbin /usr/share /var/lib /Users /System /Library
    /Applications /private /snap""".split())
_SYSTEM_DIRS = ("/etc/", "/usr/", "/bin/", "/sbin/", "/lib/", "/lib32/", "/lib64/", "/boot/", "/System/")


def is_critical(p: str) -> bool:
    """`/`, home, a top-level system directory, or a glob over one of them (`/*`, `~/*`)."""
    n = norm_path(p)
    if n in CRITICAL or re.fullmatch(r"~[\w.-]+|/(?:home|Users)/[^/]+|(?:\.\./){4,}\.\.", n):
        return True
    head, sep, last = n.rpartition("/")
    return bool(sep and _GLOB.search(last) and (head or "/") in CRITICAL)


_SYSTEM_TOP = frozenset({"/", "/etc", "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/boot", "/System"})


def is_system(p: str) -> bool:
    """An operating-system location: `/`, /etc, /usr, /bin, /boot, ... or anything below them."""
    n = norm_path(p)
    return n in _SYSTEM_TOP or n.startswith(_SYSTEM_DIRS)


_DEVICE = re.compile(r"/dev/(?:sd[a-z]+\d*|hd[a-z]\d*|x?vd[a-z]+\d*|nvme\d+(?:n\d+(?:p\d+)?)?|mmcblk\d+(?:p\d+)?"
                     r"|r?disk\d+(?:s\d+)*|md\d+|dm-\d+|nbd\d+|sg\d+|mapper/\S+|disk/\S+|mem|kmem|port)")


def is_device(p: str) -> bool:
    return bool(_DEVICE.fullmatch(norm_path(p)))


RC_FILES = frozenset(""".bashrc .bash_profile .bash_login .bash_logout .profile .zshrc .zprofile .zshenv .zlogin
    .cshrc .tcshrc .kshrc .mkshrc .xprofile .xinitrc""".split())
_LABELS = (  # (prefix, label); a prefix ending in "/" also matches the directory itself
    ("~/.ssh/", "ssh keys/config"), ("/etc/sudoers", "sudoers"),
    ("/etc/cron", "cron jobs"), ("/var/spool/cron", "cron jobs"), ("/etc/anacrontab", "cron jobs"),
    ("/etc/systemd/", "systemd units"), ("/lib/systemd/", "systemd units"), ("/usr/lib/systemd/", "systemd units"),
    ("~/.config/systemd/", "systemd units"), ("/etc/init.d/", "init scripts"), ("/etc/rc.local", "init scripts"),
    ("~/Library/LaunchAgents/", "launch agents"), ("/Library/Launch", "launch agents"),
    ("~/.config/autostart/", "autostart entries"), ("~/.config/fish/config.fish", "shell startup file"),
    ("/etc/profile", "shell startup file"), ("/etc/bash.bashrc", "shell startup file"),
    ("/etc/bashrc", "shell startup file"), ("/etc/zsh", "shell startup file"), ("/etc/environment", "shell startup file"),
    ("/etc/passwd", "account database"), ("/etc/shadow", "account database"), ("/etc/group", "account database"),
    ("/etc/gshadow", "account database"), ("/etc/ld.so.preload", "dynamic loader preload"),
    ("~/.aws/", "cloud credentials"), ("~/.kube/", "cloud credentials"), ("~/.gnupg/", "gpg keys"),
    ("~/.local/bin/", "programs on your PATH"), ("~/bin/", "programs on your PATH"),
    ("~/.netrc", "stored credentials"), ("~/.npmrc", "stored credentials"), ("~/.pypirc", "stored credentials"),
    ("~/.git-credentials", "stored credentials"), ("~/.gitconfig", "global git config"),
    ("~/.config/git/", "global git config"), ("~/.docker/", "docker config"),
    ("/proc/sys/", "kernel settings"), ("/etc/", "system configuration"), ("/usr/", "system directory"),
    ("/bin/", "system directory"), ("/sbin/", "system directory"), ("/lib/", "system directory"),
    ("/lib32/", "system directory"), ("/lib64/", "system directory"), ("/boot/", "boot files"),
    ("/System/", "system directory"),
)


def sensitive_label(p: str) -> str | None:
    n = norm_path(p)
    n = re.sub(r"^(?:/root|/home/[^/]+|/Users/[^/]+)(?=/|$)", "~", n)
    if n == ".ssh" or n.startswith(".ssh/"):  # relative: the agent often works in ~
        n = "~/" + n
    base = n.rsplit("/", 1)[-1]
    if base == "known_hosts":
        return None
    if base == "authorized_keys":
        return "ssh authorized_keys"
    if base in RC_FILES and (n == base or n == "~/" + base):
        return "shell startup file"
    for prefix, label in _LABELS:
        if n.startswith(prefix) or (prefix.endswith("/") and n == prefix[:-1]):
            return label
    return None


_CODE_FILES = re.compile(r"(^|/)\.git/(hooks(/[^/]*)?|config)$|(^|/)\.envrc$|(^|/)(sitecustomize|usercustomize)\.py$"
                         r"|\.pth$|^~/\.(vimrc|exrc|gvimrc|gdbinit|tmux\.conf|screenrc|emacs|xsessionrc|xsession|wgetrc"
                         r"|curlrc|pythonrc|perldb|inputrc)$|^~/\.(config/nvim|vim|emacs\.d)/|^/var/log/"
                         r"|(^|/)\.(bash|zsh|sh|python|psql|mysql|node_repl|sqlite|rediscli)_?history$"
                         r"|^/(var/)?run/docker\.sock$")


def _code_file(n: str) -> str | None:
    """Files that make code run later (hooks, startup files of editors and interpreters) or hold the record."""
    m = _CODE_FILES.search(n)
    if not m:
        return None
    return ("system logs" if n.startswith("/var/log/") else "shell history" if n.endswith("history") else
            "the docker socket" if n.endswith("docker.sock") else "a file that runs code later")


def write_risk(p: str) -> tuple[int, str] | None:
    """How bad writing to path `p` is, or None when it is an ordinary file."""
    n = norm_path(p)
    if n.startswith(("/dev/tcp/", "/dev/udp/")):
        return DANGEROUS, "network redirection (reverse shell?)"
    if is_device(n):
        return HARDLINE, "overwrite of a disk device"
    if n == "/proc/sysrq-trigger":
        return HARDLINE, "kernel sysrq trigger"
    if n.startswith("/dev/"):
        return None
    if n == "/sys/power/state" or n.startswith("/sys/firmware/efi/efivars/"):
        return HARDLINE, "power off / suspend through /sys" if "power" in n else "overwrite of firmware variables"
    label = sensitive_label(n) or _code_file(n)
    if label:
        return DANGEROUS, f"write to {label}"
    if is_critical(n):
        return DANGEROUS, "write over a system directory"
    return None


def _writes(c: Call, paths) -> Iterator[Hit]:
    for p in paths:
        risk = write_risk(p)
        if risk:
            yield Hit(risk[0], risk[1], c.shown)


# ---------------------------------------------------------------- file system rules

def r_rm(c: Call) -> Iterator[Finding]:
    o = parse(c.args)
    recursive = o.has("r", "R", "recursive")
    crit = [t for t in o.pos if is_critical(c.at(t))]
    if crit and (recursive or c.bulk):
        yield Hit(HARDLINE, "wipe of / or home", c.shown)
    elif recursive:
        yield Hit(DANGEROUS, "recursive delete", c.shown)
    elif c.bulk:
        yield Hit(DANGEROUS, "bulk delete", c.shown)
    elif crit or any(sensitive_label(t) for t in o.pos):
        yield Hit(DANGEROUS, "delete of a protected file", c.shown)


_FIND_FILTERS = {"-name", "-iname", "-path", "-ipath", "-regex", "-iregex", "-wholename", "-iwholename", "-lname",
                 "-inum", "-samefile", "-newer", "-mtime", "-mmin", "-atime", "-ctime", "-size", "-user", "-group",
                 "-empty", "-links", "-perm"}


def r_find(c: Call) -> Iterator[Finding]:
    args, i = c.args, 0
    while i < len(args) and args[i] in ("-H", "-L", "-P") or (i < len(args) and args[i].startswith(("-O", "-D"))):
        i += 2 if args[i] == "-D" else 1
    roots = []
    while i < len(args) and not args[i].startswith("-") and args[i] not in ("(", "!", ","):
        roots.append(args[i])
        i += 1
    roots = roots or ["."]
    expr = args[i:]
    roots = [c.at(r) for r in roots]
    filters = {a for k, a in enumerate(expr) if a in _FIND_FILTERS and expr[k + 1:k + 2] not in (["*"], ["*/*"])}
    wipe = any(is_critical(r) for r in roots) and not filters
    if "-delete" in expr:
        yield Hit(HARDLINE if wipe else DANGEROUS, "wipe of / or home" if wipe else "recursive delete", c.shown)
    j = 0
    while j < len(expr):
        if expr[j] in ("-exec", "-execdir", "-ok", "-okdir"):
            k = j + 1
            while k < len(expr) and expr[k] not in (";", "+"):
                k += 1
            sub = expr[j + 1:k]
            if wipe:
                root = next(r for r in roots if is_critical(r))
                sub = [w.replace("{}", root) for w in sub]
            elif pattern := find_pattern(expr):  # find ~ -name '*.pem' -exec curl -F f=@{}: {} is a *.pem
                sub = [w.replace("{}", pattern) for w in sub]
            if sub:
                yield Recurse("argv", tuple(sub), f"find {expr[j]}", bulk=True)
            j = k
        j += 1


def r_chmod(c: Call) -> Iterator[Finding]:
    args = [a if not re.fullmatch(r"-[rwxXst]+", a) else "\0" + a for a in c.args]  # "-x" is a mode
    o = parse(args, long=("reference",))
    pos = [a.lstrip("\0") for a in o.pos]
    recursive = o.has("R", "recursive") or c.bulk
    if c.name == "chmod" and not o.longs.get("reference"):
        mode, targets = (pos[0] if pos else ""), pos[1:]
    else:
        mode, targets = "", (pos[1:] if c.name != "chmod" else pos)
    what = "permission" if c.name == "chmod" else "ownership"
    targets = [c.at(t) for t in targets]
    crit = [t for t in targets if is_critical(t) and norm_path(t) != "/usr/local"]  # (/usr/local: nothing vital)
    if recursive and crit:
        where = "/ or home" if any(re.fullmatch(r"/|~.*|/(home|Users)(/[^/]+)?|/root", re.sub(r"/\*$", "", norm_path(
            t)) or "/") for t in crit) else "a top-level system directory"
        yield Hit(HARDLINE, f"recursive {what} change on {where}", c.shown)
        return
    if recursive:
        yield Hit(DANGEROUS, f"recursive {c.name}", c.shown)
    if c.name != "chmod":
        if any(is_system(t) or is_critical(t) for t in targets):
            yield Hit(DANGEROUS, "ownership change of a system path", c.shown)
        return
    world = (mode.isdigit() and int(mode[-1]) & 2) or re.search(r"(?:^|,)[ugoa]*[oa][ugoa]*[+=][^,]*w", mode)
    none = mode.isdigit() and int(mode) == 0
    if (world or none) and any(is_system(t) or is_critical(t) or sensitive_label(t) for t in targets):
        yield Hit(DANGEROUS, "chmod of a system path", c.shown)
    if (mode.isdigit() and len(mode) == 4 and int(mode[0]) & 6) or re.search(r"[+=][^,]*s", mode):
        yield Hit(DANGEROUS, "setuid/setgid bit", c.shown)


def r_copy(c: Call) -> Iterator[Finding]:  # mv, cp, install, ln, rsync
    o = parse(c.args, short={"install": "tSmog", "rsync": "eTfB"}.get(c.name, "tS"),
              long=("target-directory", "suffix", "mode", "owner", "group", "rsh", "exclude", "include", "filter"))
    dest = o.val("t", "target-directory")
    srcs = o.pos if dest else o.pos[:-1]
    if not dest and len(o.pos) >= 2:
        dest = o.pos[-1]
    if c.name == "mv" and any(is_critical(c.at(s)) for s in srcs):
        yield Hit(HARDLINE, "moving away / or home", c.shown)
    elif c.name == "mv" and any(is_system(s) or sensitive_label(s) for s in srcs):
        yield Hit(DANGEROUS, "move of a system file", c.shown)
    if not dest or (c.name == "rsync" and ":" in dest.split("/")[0]):
        return
    if c.name == "rsync" and any(k.startswith("delete") for k in o.longs):  # (to a remote: a deploy, returned above)
        yield Hit(*(HARDLINE, "sync with --delete over / or home") if is_critical(dest) else (
            DANGEROUS, "sync with --delete: deletes what the source lacks"), c.shown)
    elif c.name == "mv" and norm_path(dest) == "/dev/null":
        yield Hit(DANGEROUS, "move into /dev/null", c.shown)
    elif is_system(dest) and not write_risk(dest):
        yield Hit(DANGEROUS, "overwrite in a system directory", c.shown)
    else:
        yield from _writes(c, [dest])


def r_tee(c: Call) -> Iterator[Finding]:
    yield from _writes(c, parse(c.args).pos)


def r_sed(c: Call) -> Iterator[Finding]:
    o = parse(c.args, short="efl", long=("expression", "file", "line-length"))
    if o.has("i", "in-place"):
        yield from _writes(c, o.pos if o.has("e", "f", "expression", "file") else o.pos[1:])


def r_truncate(c: Call) -> Iterator[Finding]:
    yield from _writes(c, parse(c.args, short="sor", long=("size", "reference")).pos)


def r_dd(c: Call) -> Iterator[Finding]:
    for a in c.args:
        if a.startswith("of="):
            yield from _writes(c, [a[3:]])


def r_tar(c: Call) -> Iterator[Finding]:
    args = c.args
    first = args[0] if args else ""
    extract = ("x" in first and not first.startswith("-")) or any(
        a in ("--extract", "--get") or (re.fullmatch(r"-[a-zA-Z]+", a) and "x" in a) for a in args)
    for k, a in enumerate(args):
        target = args[k + 1] if a == "-C" and k + 1 < len(args) else a.partition("=")[2] if a.startswith("--directory=") else None
        if extract and target and is_system(target):
            yield Hit(DANGEROUS, "extract into a system directory", c.shown)


def r_shred(c: Call) -> Iterator[Finding]:
    targets = parse(c.args, short="nsx", long=("iterations", "size", "random-source")).pos
    if any(is_device(t) for t in targets):
        yield Hit(HARDLINE, "shredding a disk device", c.shown)
    elif targets:
        yield Hit(DANGEROUS, "irrecoverable file shredding", c.shown)


# ---------------------------------------------------------------- disks, power, processes

def r_disk(c: Call) -> Iterator[Finding]:
    n, args = c.name, c.args
    if any(a in ("--help", "-h", "-V", "--version") for a in args) and n != "parted":
        return
    if n.startswith(("mkfs", "mke2fs", "mkntfs", "mkdosfs", "newfs")) or n in ("blkdiscard", "mkswap"):
        targets = [c.at(a) for a in args if not a.startswith("-") and not a.isdigit()]
        if n == "blkdiscard" or not targets or any(t.startswith("/dev/") or _GLOB.search(t) or "$" in t or "…" in t
                                                   for t in targets):
            yield Hit(HARDLINE, "formatting a disk", c.shown)
        else:  # an image file (mkfs.ext4 -F disk.img): a write to that file
            yield from _writes(c, targets)
    elif n == "wipefs":
        if not any(a in ("-n", "--no-act") for a in args) and any(
                a in ("--all", "--offset") or re.fullmatch(r"-[a-zA-Z]*[ao][a-zA-Z]*", a) or a.startswith(
                    ("--offset=", "-o")) for a in args):
            yield Hit(HARDLINE, "wiping disk signatures", c.shown)
    elif n == "cryptsetup":
        if any(a.lower() in ("luksformat", "erase", "luksErase") for a in args):
            yield Hit(HARDLINE, "formatting a disk", c.shown)
    elif n in ("fdisk", "sfdisk", "cfdisk", "gdisk", "sgdisk", "parted"):
        listing = {"-l", "--list", "print", "-p", "--print", "-d", "--dump"}
        if n == "sgdisk" and any(a in ("-Z", "--zap-all", "-o", "--clear", "-z", "--zap") for a in args):
            yield Hit(HARDLINE, "wiping a partition table", c.shown)
        elif any(is_device(a) for a in args) and not (listing & set(args)):
            typed = c.stdin_kind == "" and (n in ("fdisk", "cfdisk", "gdisk") or n == "parted" and not any(
                a in ("-s", "--script") for a in args) and not args[[is_device(a) for a in args].index(True) + 1:])
            yield Hit(*(DANGEROUS, "interactive partitioning (nothing changes until a person writes it)") if typed
                      else (HARDLINE, "rewriting a partition table"), c.shown)
    elif n in ("lvremove", "vgremove", "pvremove") or (n in ("zfs", "zpool") and "destroy" in args):
        yield Hit(HARDLINE, "destroying a volume", c.shown)


def r_power(c: Call) -> Iterator[Finding]:
    args = c.args
    if "--help" in args or (c.name == "shutdown" and any(a in ("-c", "-k", "--show") for a in args)):
        return
    if c.name in ("init", "telinit"):
        if args and args[0] in ("0", "6", "1", "s", "S", "single"):
            yield Hit(HARDLINE, "power off / reboot", c.shown)
        return
    if c.name == "kexec" and not any(a in ("-e", "--exec") for a in args):
        return
    yield Hit(HARDLINE, "power off / reboot", c.shown)


_KILL_SIGS = {"9", "KILL", "SIGKILL"}


def r_kill(c: Call) -> Iterator[Finding]:
    if c.name == "fuser":
        if any(re.fullmatch(r"-\w*k\w*", a) or a == "--kill" for a in c.args):
            yield Hit(DANGEROUS, "killing processes by port/file", c.shown)
        return
    if c.name != "kill":
        if not any(a in ("-l", "--list", "-L", "-V", "--version", "--help") for a in c.args):
            yield Hit(DANGEROUS, "killing processes by name", c.shown)
        return
    sig, pids, args, i = None, [], c.args, 0
    while i < len(args):
        a = args[i]
        if a == "--":
            pids += args[i + 1:]
            break
        if a in ("-l", "-L", "--list", "--table"):
            return
        if a in ("-s", "-n", "--signal") and i + 1 < len(args):
            sig, i = args[i + 1], i + 1
        elif a.startswith("-") and sig is None and not pids and len(a) > 1:
            sig = a[1:]
        else:
            pids.append(a)
        i += 1
    sig = (sig or "TERM").upper()
    if sig in ("0", "SIG0"):
        return
    if "-1" in pids or ("1" in pids and sig.removeprefix("SIG") not in ("HUP", "1", "CONT", "18", "WINCH", "USR1",
                                                                        "USR2")):
        yield Hit(HARDLINE, "killing every process / init", c.shown)
    elif sig in _KILL_SIGS or sig.removeprefix("SIG") in ("STOP", "19", "TSTP"):
        yield Hit(DANGEROUS, "force kill (SIGKILL)" if sig in _KILL_SIGS else "stopping a process", c.shown)
    elif any(p in ("$PPID", "${PPID}") for p in pids):
        yield Hit(DANGEROUS, "killing the parent process (chatgate itself)", c.shown)
    elif PIDS_FOUND in pids or c.bulk and not pids:  # pgrep x | xargs kill: pkill by another name
        yield Hit(DANGEROUS, "killing the processes a search found", c.shown)
    elif c.root:  # root reaches every process: a system service, another user's
        yield Hit(DANGEROUS, "signals a process with root privileges", c.shown)


_SYSTEMCTL_HARD = {"poweroff", "reboot", "halt", "kexec", "rescue", "emergency", "soft-reboot", "default"}
_SYSTEMCTL_BAD = {"stop", "disable", "mask", "kill", "isolate", "suspend", "hibernate", "hybrid-sleep", "restart",
                  "try-restart", "reload-or-restart", "try-reload-or-restart", "daemon-reexec",
                  "suspend-then-hibernate", "edit", "revert", "set-default"}


def r_systemctl(c: Call) -> Iterator[Finding]:
    o = parse(c.args, short="HMtpnosP", long=("host", "machine", "type", "property", "lines", "output", "signal",
                                               "state", "root", "kill-whom"))
    sub = o.pos[0] if o.pos else ""
    if c.name == "loginctl":
        if sub in ("poweroff", "reboot", "halt"):
            yield Hit(HARDLINE, "power off / reboot", c.shown)
        elif sub.startswith(("terminate", "kill")):
            yield Hit(DANGEROUS, "terminating sessions", c.shown)
    elif sub in _SYSTEMCTL_HARD or (sub == "isolate" and any(
            t.startswith(("rescue", "emergency", "poweroff", "reboot", "halt")) for t in o.pos[1:])):
        yield Hit(HARDLINE, "power off / reboot", c.shown)
    elif sub in _SYSTEMCTL_BAD:
        yield Hit(DANGEROUS, f"systemctl {sub}", c.shown)


def r_service(c: Call) -> Iterator[Finding]:
    if len(c.args) >= 2 and c.args[1] in ("stop", "disable", "kill", "zap", "restart", "force-reload",
                                          "try-restart", "condrestart"):
        yield Hit(DANGEROUS, "stopping or restarting a service", c.shown)


from agent.command_containers import r_docker, r_infra, r_kubectl  # noqa: E402 (it uses the names above)


from agent.command_rules_tools import (  # noqa: E402 (they use the names above)
    _PUBLISH, download_info, r_admin, r_crontab, r_git, r_publish, r_sql_client)


# ---------------------------------------------------------------- dispatch

_RULES: dict[str, Callable[[Call], Iterator[Finding]]] = {
    "rm": r_rm, "unlink": r_rm, "find": r_find, "chmod": r_chmod, "chown": r_chmod, "chgrp": r_chmod,
    "mv": r_copy, "cp": r_copy, "install": r_copy, "ln": r_copy, "rsync": r_copy, "tee": r_tee, "sponge": r_tee,
    "sed": r_sed, "gsed": r_sed, "truncate": r_truncate, "dd": r_dd, "tar": r_tar, "gtar": r_tar,
    "shred": r_shred, "srm": r_shred, "wipe": r_shred,
    "shutdown": r_power, "reboot": r_power, "halt": r_power, "poweroff": r_power, "init": r_power,
    "telinit": r_power, "kexec": r_power,
    "kill": r_kill, "fuser": r_kill, "killall": r_kill, "pkill": r_kill, "killall5": r_kill, "skill": r_kill,
    "systemctl": r_systemctl, "loginctl": r_systemctl, "service": r_service, "rc-service": r_service,
    "docker": r_docker, "podman": r_docker, "nerdctl": r_docker, "docker-compose": r_docker,
    "podman-compose": r_docker, "kubectl": r_kubectl, "helm": r_kubectl, "oc": r_kubectl,
    "terraform": r_infra, "tofu": r_infra, "pulumi": r_infra, "cdk": r_infra, "aws": r_infra,
    "gcloud": r_infra, "az": r_infra, "git": r_git, "crontab": r_crontab,
    "psql": r_sql_client, "mysql": r_sql_client, "mariadb": r_sql_client, "sqlite3": r_sql_client,
    "duckdb": r_sql_client, "clickhouse-client": r_sql_client, "sqlcmd": r_sql_client, "cqlsh": r_sql_client,
    "redis-cli": r_sql_client, "mongo": r_sql_client, "mongosh": r_sql_client,
}
for _n in ("visudo vipw vigr userdel deluser groupdel delgroup usermod passwd chpasswd useradd adduser iptables "
           "ip6tables iptables-legacy iptables-nft nft ufw ip ifconfig ifdown nmcli apt apt-get aptitude dnf yum "
           "microdnf zypper apk snap pacman nc ncat netcat socat launchctl").split():
    _RULES[_n] = r_admin
for _n in _PUBLISH:
    _RULES.setdefault(_n, r_publish)
for _n in ("fdisk sfdisk cfdisk gdisk sgdisk parted wipefs blkdiscard mkswap mke2fs mkntfs mkdosfs cryptsetup "
           "lvremove vgremove pvremove zfs zpool").split():
    _RULES[_n] = r_disk
RULE_NAMES = frozenset(_RULES)


def check(c: Call) -> Iterator[Finding]:
    """All findings for one normalised simple command."""
    rule = _RULES.get(c.name)
    if rule is None and c.name.startswith(("mkfs", "newfs")):
        rule = r_disk
    if rule is None and c.raw0.startswith("/etc/init.d/"):
        c.args = [c.name] + c.args
        rule = r_service
    if rule is not None:
        yield from rule(c)
    from agent.command_categories import RULES  # (it builds on this module's names)

    for more in RULES.get(c.name, ()):
        yield from more(c)
    if c.name in ("curl", "wget", "fetch", "aria2c"):
        yield from _writes(c, download_info(c.name, c.args)[1])
