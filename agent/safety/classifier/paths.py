"""What a path is, for the rules: critical (`/`, home, a top-level system directory), a system location, a
disk device, a sensitive file (ssh keys, sudoers, cron, shell startup files, ...), a secret (`secret_label`),
a file that usually holds secrets (`sensitive_file`), private data (`private_path`); and how bad a write
to it is (`write_risk`, `writes`). Paths are compared in a canonical form (`norm_path`: `~` for home).
"""

from __future__ import annotations

import os
import posixpath
import re
from typing import Iterator

from agent.safety.classifier.lazy import lazy_re
from agent.safety.classifier.vocabulary import DANGEROUS, HARDLINE, Call, Hit

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


GLOB = lazy_re(r"[*?\[]")
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
    return bool(sep and GLOB.search(last) and (head or "/") in CRITICAL)


_SYSTEM_TOP = frozenset({"/", "/etc", "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/boot", "/System"})


def is_system(p: str) -> bool:
    """An operating-system location: `/`, /etc, /usr, /bin, /boot, ... or anything below them."""
    n = norm_path(p)
    return n in _SYSTEM_TOP or n.startswith(_SYSTEM_DIRS)


_DEVICE = lazy_re(r"/dev/(?:sd[a-z]+\d*|hd[a-z]\d*|x?vd[a-z]+\d*|nvme\d+(?:n\d+(?:p\d+)?)?|mmcblk\d+(?:p\d+)?"
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
    ("~/.config/environment.d/", "session environment (LD_PRELOAD, PATH)"),
    ("~/.pam_environment", "session environment (LD_PRELOAD, PATH)"),
    ("~/.pip/", "pip config (where packages come from)"), ("~/.config/pip/", "pip config (where packages come from)"),
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


_CODE_FILES = lazy_re(r"(^|/)\.git/(hooks(/[^/]*)?|config)$|(^|/)\.envrc$|(^|/)(sitecustomize|usercustomize)\.py$"
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


def writes(c: Call, paths) -> Iterator[Hit]:
    for p in paths:
        risk = write_risk(p)
        if risk:
            yield Hit(risk[0], risk[1], c.shown)


# ---------------------------------------------------------------- secrets

_SECRET_FILES = (  # (pattern over a normalised path, label)
    (r"~/\.ssh/?", "ssh keys"),
    (r"~/\.ssh/(?!.*\.pub$)(?!known_hosts|config$|authorized_keys)[^/]+", "ssh private key"),
    (r"(?:~|/root|/home/[^/]+)?/?\.ssh/id_[^/]*(?<!\.pub)", "ssh private key"),
    (r"/etc/ssh/ssh_host_[^/]*_key", "ssh host key"),
    (r"~/\.aws/(credentials|config)|~/\.config/gcloud(/.*)?|~/\.azure(/.*)?|~/\.kube/config|~/\.(aws|kube)/?",
     "cloud credentials"),
    (r"~/\.(netrc|npmrc|pypirc|git-credentials|docker/config\.json|config/gh/hosts\.yml|vault-token)",
     "stored credentials"),
    (r"~/\.(gnupg|password-store)(/.*)?", "private keys"),
    (r"~/\.(bash|zsh|sh|python|psql|mysql|node_repl|sqlite|rediscli)_?history|~/\.local/share/fish/fish_history",
     "shell history"),
    (r"/etc/(g?shadow)-?", "password hashes"),
    (r"/proc/[^/]+/environ", "another process's environment"),
    (r"(/var)?/run/secrets/.+|/etc/ssl/private(/.*)?|/etc/(pki/tls|letsencrypt)/(private|archive|live)/.*",
     "service secrets or private keys"),
    (r"~/\.(pgpass|my\.cnf|config/rclone/rclone\.conf|terraform\.d/credentials\.tfrc\.json|config/hub"
     r"|config/glab-cli/config\.yml|s3cfg|boto|oci/config|config/doctl/config\.yaml|vault-token|cargo/credentials"
     r"(\.toml)?|gem/credentials|config/op(/.*)?|local/share/keyrings(/.*)?)", "stored credentials"),
    (r"(~/\.chatgate|\$\{?CHATGATE_HOME\}?)(/.*)?|(\.\./)+(config\.yaml|state\.db(-wal|-shm)?|webchat-token)"
     r"|(\.\./)+\.chatgate(/.*)?", "chatgate's own state (config, database, tokens)"),
    (r"~/\.(config/(chromium|google-chrome[^/]*|BraveSoftware|microsoft-edge[^/]*|vivaldi|opera)|mozilla/firefox"
     r"|var/app/[^/]+|snap/(chromium|firefox))(/.*)?", "a browser profile (cookies, saved passwords, site storage)"),
)
_SECRET_RE = [(lazy_re(p), label) for p, label in _SECRET_FILES]


def secret_label(path: str) -> str | None:
    """What secret `path` holds, or None."""
    n = norm_path(path.lstrip("@<"))  # curl -d @file, -F f=@file
    n = re.sub(r"^(?:/root|/home/[^/]+|\$HOME|\$\{HOME\})(?=/|$)", "~", n)
    if n.startswith(".ssh/"):
        n = "~/" + n
    return next((label for pattern, label in _SECRET_RE if pattern.fullmatch(n)), None)


_ENV_FILE = lazy_re(r"(^|/)(\.env(\.[\w.-]+)?|[^/]*\.(key|p12|pfx|kdbx|jks|keystore)|[^/]*(key|priv|[*?])[^/]*\.pem"
                    r"|(credentials|service[-_]?account)[^/]*\.json|[^/]*secrets?\.[\w-]+|id_[a-z0-9]+"
                    r"|\.(pgpass|netrc|git-credentials|htpasswd))$", re.I)
_TEMPLATE = lazy_re(r"[._-](example|sample|template|dist|defaults?|tmpl|tpl|md|rst)$|\.pub$", re.I)


def secrets_file(path: str) -> bool:
    n = norm_path(path.lstrip("@<"))
    return bool(_ENV_FILE.search(n)) and not _TEMPLATE.search(n)


def sensitive_file(path: str) -> str | None:
    """A secret file, or a file that usually holds secrets (.env, key.pem, *.key, credentials.json); not a
    template of one (.env.example)."""
    return secret_label(path) or ("secrets file" if secrets_file(path) else None)


# ---------------------------------------------------------------- private data

_HOME_FOLDERS = lazy_re(r"~|~[\w.-]+|/home|/Users|/root|~/(Documents|Desktop|Downloads|Pictures|Photos|Movies"
                        r"|Videos|Music|Mail|Library|Dropbox|OneDrive|Google Drive|iCloud Drive|Nextcloud|\.config"
                        r"|\.local|\.local/share|\.mozilla|\.thunderbird|\.var|snap)")
_PRIVATE_TREES = lazy_re(r"~/(Documents|Desktop|Pictures|Photos|Mail|Library|\.mozilla|\.thunderbird)/|/root/")
_SYSTEM_FILES = lazy_re(r"/(etc|var/log|var/lib|var/mail|var/spool|proc|boot)(/.*)?")


def private_path(path: str) -> str | None:
    """What private data `path` names: a secret, a home or personal folder, system files, a raw disk; or None."""
    p = path.lstrip("@<").split(";", 1)[0]
    if not p or "://" in p or re.match(r"[\w.-]+@[\w.-]+:|[\w.-]+:(?!/)", p):
        return None
    if label := sensitive_file(p):
        return label
    n = re.sub(r"^/(home|Users)/[^/]+(?=/|$)", "~", re.sub(r"/\.?\*$", "", norm_path(p)) or "/")
    if n == "/":
        return "the whole file system"
    if _HOME_FOLDERS.fullmatch(n) or _PRIVATE_TREES.match(n):
        return "a home or personal folder"
    if _SYSTEM_FILES.fullmatch(n):
        return "system files"
    if is_device(n):
        return "a raw disk"
    return None
