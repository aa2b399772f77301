"""Rules for the machine itself: formatting and partitioning disks, power, signals to other processes,
services; kernel and network settings, mounts, security modules, packages, boot, logs; disks and volumes;
programs set to start later.

Each table lists, per program, the subcommands or options that change the system; what only
shows its state (`sysctl -a`, `mount`, `ip route`, `zpool status`, `systemctl is-enabled`) stays
safe. Whole-disk destruction and power-off are hardline.
"""

from __future__ import annotations

import re
from typing import Iterator

from agent.safety.classifier.flow import PIDS_FOUND
from agent.safety.classifier.lazy import lazy_re
from agent.safety.classifier.paths import GLOB, is_critical, is_device, is_system, secret_label, sensitive_label, writes
from agent.safety.classifier.vocabulary import DANGEROUS, HARDLINE, Call, Finding, Hit, by_name, parse

# ---------------------------------------------------------------- disks, power, processes

def r_disk(c: Call) -> Iterator[Finding]:
    n, args = c.name, c.args
    if any(a in ("--help", "-h", "-V", "--version") for a in args) and n != "parted":
        return
    if n.startswith(("mkfs", "mke2fs", "mkntfs", "mkdosfs", "newfs")) or n in ("blkdiscard", "mkswap"):
        targets = [c.at(a) for a in args if not a.startswith("-") and not a.isdigit()]
        if n == "blkdiscard" or not targets or any(t.startswith("/dev/") or GLOB.search(t) or "$" in t or "…" in t
                                                   for t in targets):
            yield Hit(HARDLINE, "formatting a disk", c.shown)
        else:  # an image file (mkfs.ext4 -F disk.img): a write to that file
            yield from writes(c, targets)
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


# ---------------------------------------------------------------- system configuration

_SET_VERBS = {  # program -> subcommands that change the system (first positional word)
    "hostnamectl": {"set-hostname", "hostname", "set-icon-name", "set-chassis", "set-deployment", "set-location"},
    "timedatectl": {"set-time", "set-timezone", "set-ntp", "set-local-rtc"},
    "localectl": {"set-locale", "set-keymap", "set-x11-keymap"},
    "update-rc.d": {"defaults", "enable", "disable", "remove", "defaults-disabled"},
    "rc-update": {"add", "del", "delete"}, "chkconfig": {"on", "off", "--add", "--del", "add", "del"},
    "aa-teardown": {""}, "aa-disable": {""}, "aa-complain": {""}, "setenforce": {""}, "swapoff": {""},
    "update-grub": {""}, "grub-install": {""}, "grub-mkconfig": {"-o"}, "grub2-install": {""},
    "insmod": {""}, "rmmod": {""}, "umount": {""}, "iw": {"disconnect", "del", "set"}, "route": {"del", "add", "flush"},
    "ifup": {""}, "tc": {"add", "del", "change", "replace"}, "pm2": {"startup", "unstartup", "save"},
    "dpkg-reconfigure": {""}, "update-alternatives": {"--set", "--install", "--remove", "--remove-all", "--config"},
}


def r_system(c: Call) -> Iterator[Finding]:
    n, a = c.name, c.args
    words = [x for x in a if not x.startswith("-")]
    if any(x in ("--help", "--version") for x in a):
        return
    verbs = _SET_VERBS.get(n)
    if verbs is not None:
        if ("" in verbs or words[:1] and words[0] in verbs or verbs & set(a)) and not (
                n == "grub-mkconfig" and "-o" not in a or n == "umount" and not a):
            yield Hit(DANGEROUS, f"changes the system ({n})", c.shown)
        return
    if n == "hostname":
        if [w for w in words if not w.startswith("-")] and not any(x in ("-f", "-i", "-I", "-s", "-d", "-A", "-y",
                                                                        "--fqdn", "--short") for x in a):
            yield Hit(DANGEROUS, "changes the host name", c.shown)
    elif n == "sysctl":
        if any(x in ("-w", "--write", "-p", "--load", "--system") or x.startswith("-p") for x in a) or any(
                "=" in w for w in words):
            yield Hit(DANGEROUS, "changes a kernel setting (sysctl)", c.shown)
    elif n == "modprobe":
        if not any(x in ("-n", "--dry-run", "-c", "--showconfig", "-D", "--show-depends") for x in a) and words:
            yield Hit(DANGEROUS, "loads or unloads a kernel module", c.shown)
    elif n == "mount":
        o = parse(a, "tOoLUTBpN", ("types", "options", "test-opts", "label", "uuid", "target", "source"))
        if o.pos or any(x in ("-a", "--all", "--bind", "--rbind", "--move") or "remount" in x for x in a):
            yield Hit(DANGEROUS, "mounts or remounts a file system", c.shown)
    elif n in ("ip", "nmcli", "ifconfig"):
        text = " ".join(a)
        if n == "ip" and re.search(r"\b(route|r|ro|addr|address|a|neigh|rule|link|l)\s+(del|delete|flush|replace|"
                                   r"change)\b", text) or n == "nmcli" and re.search(r"\b(down|delete|del)\b", text):
            yield Hit(DANGEROUS, "changes the network configuration", c.shown)
    elif n in ("dpkg", "rpm"):
        if any(x in ("-r", "--remove", "-P", "--purge", "-e", "--erase") for x in a):
            yield Hit(DANGEROUS, "system package removal", c.shown)
    elif n == "chattr" and any(is_system(x) or x.startswith("/var/") for x in words[1:] + [w for w in words if
                                                                                         w.startswith("/")]):
        yield Hit(DANGEROUS, "changes attributes of a system file (chattr)", c.shown)
    elif n == "journalctl" and any(x.startswith(("--vacuum", "--rotate", "--flush", "--relinquish-var")) for x in a):
        yield Hit(DANGEROUS, "deletes or rotates the system journal", c.shown)
    elif n == "dmesg" and any(re.fullmatch(r"-[a-zA-Z]*[cC][a-zA-Z]*", x) or x in ("--clear", "--read-clear")
                              for x in a):
        yield Hit(DANGEROUS, "clears the kernel log", c.shown)
    elif n == "auditctl" and (any(x in ("-D", "-e") for x in a)):
        yield Hit(DANGEROUS, "changes or turns off auditing", c.shown)
    elif n == "ethtool" and any(x in ("-s", "--change", "-K", "--offload", "-G", "--set-ring", "-r", "--negotiate",
                                      "-E", "-f", "--flash") for x in a):
        yield Hit(DANGEROUS, "changes a network interface (ethtool)", c.shown)
    elif n == "systemctl" and words[:1] and words[0] in ("enable", "reenable", "link", "preset", "preset-all",
                                                       "add-wants", "add-requires", "set-property", "revert"):
        yield Hit(DANGEROUS, "makes a unit start by itself, or changes it (systemctl)", c.shown)
    elif n == "launchctl" and words[:1] and words[0] in ("load", "bootstrap", "submit", "enable", "kickstart"):
        yield Hit(DANGEROUS, f"installs or starts a launch agent (launchctl {words[0]})", c.shown)


# ---------------------------------------------------------------- disks and volumes

def r_disks_more(c: Call) -> Iterator[Finding]:
    n, a = c.name, c.args
    if n == "ddrescue" and len([x for x in a if not x.startswith("-")]) >= 2 and is_device(
            [x for x in a if not x.startswith("-")][1]):
        yield Hit(HARDLINE, "overwrite of a disk device (ddrescue)", c.shown)
    elif n == "badblocks" and any(re.fullmatch(r"-[a-zA-Z]*w[a-zA-Z]*", x) for x in a):
        yield Hit(HARDLINE, "erases a disk (badblocks -w)", c.shown)
    elif n == "mdadm":
        if any(x in ("--zero-superblock", "--create", "-C") for x in a):
            yield Hit(HARDLINE, "wipes or rebuilds RAID members (mdadm)", c.shown)
        elif any(x in ("--stop", "-S", "--fail", "-f", "--remove", "-r", "--grow", "-G") for x in a):
            yield Hit(DANGEROUS, "changes a RAID array (mdadm)", c.shown)
    elif n in ("zpool", "zfs"):
        sub = next((x for x in a if not x.startswith("-")), "")
        if sub in ("create", "labelclear", "destroy") or n == "zpool" and sub == "add" and "-f" in a:
            yield Hit(HARDLINE, f"destroys or formats a pool or dataset ({n} {sub})", c.shown)
        elif sub in ("rollback", "offline", "detach", "remove", "export", "split", "clear", "replace", "set",
                     "rename", "promote", "inherit", "upgrade", "attach", "trim", "initialize") and n == "zpool" or \
                sub in ("rollback", "rename", "set", "inherit", "promote", "unmount", "umount", "recv", "receive"):
            yield Hit(DANGEROUS, f"changes a pool or dataset ({n} {sub})", c.shown)
    elif n == "btrfs" and re.search(r"\b(subvolume|sub|su)\s+(delete|del|de)\b|\bdevice\s+(delete|remove)\b|"
                                    r"\b(balance|rescue|check\s+--repair|replace)\b", " ".join(a)):
        yield Hit(DANGEROUS, "changes or deletes btrfs volumes", c.shown)
    elif n in _VOLUME_TOOLS or n.startswith("fsck."):
        if not a or any(x in _READONLY.get(n.split(".")[0], ()) for x in a) or n == "debugfs" and not any(
                x in ("-w", "--writable") for x in a):
            return
        yield Hit(DANGEROUS, f"changes a file system, a volume or a disk's mapping ({n})", c.shown)


_VOLUME_TOOLS = frozenset("resize2fs xfs_repair tune2fs e2fsck fsck lvreduce lvresize lvextend growpart xfs_growfs "
                          "pvmove vgreduce pvresize losetup eject cryptsetup vgchange lvchange partprobe ntfsfix "
                          "debugfs".split())
_READONLY = {"e2fsck": ("-n",), "fsck": ("-N", "-n"), "tune2fs": ("-l",), "losetup": ("-a", "-l", "--list", "-j",
             "--associated", "-f", "--find"), "cryptsetup": ("status", "luksDump", "isLuks", "luksUUID", "benchmark",
             "open", "luksOpen"), "lvresize": ("--help",)}


# ---------------------------------------------------------------- power

_POWER_TARGETS = lazy_re(r"(poweroff|reboot|halt|kexec|shutdown|soft-reboot)\.target$")
_DESKTOP_POWER = {"xfce4-session-logout": ("--halt", "--reboot", "-h", "-r"), "gnome-session-quit": (
    "--power-off", "--reboot"), "mate-session-save": ("--shutdown-dialog",), "lxqt-leave": ("--shutdown", "--reboot"),
                  "openrc-shutdown": ("-p", "-r", "-H", "--poweroff", "--reboot", "--halt"), "zzz": (), "s2ram": (),
                  "s2disk": (), "pm-suspend": (), "pm-hibernate": (), "pm-suspend-hybrid": (), "pmset": ("sleepnow",
                  "restart", "shutdown"), "shutdown.exe": (), "halt.exe": (), "systemd-hibernate": ()}
_SLEEP_ONLY = {"zzz", "s2ram", "s2disk", "pm-suspend", "pm-hibernate", "pm-suspend-hybrid", "systemd-hibernate"}


def r_power_more(c: Call) -> Iterator[Finding]:
    n, a = c.name, c.args
    if n in ("systemctl",) and a and any(x in ("start", "isolate", "restart") for x in a[:3]) and any(
            _POWER_TARGETS.search(x) for x in a):
        yield Hit(HARDLINE, "power off / reboot", c.shown)
    elif n in _DESKTOP_POWER:
        opts = _DESKTOP_POWER[n]
        if n in _SLEEP_ONLY or n == "pmset" and "sleepnow" in a:
            yield Hit(DANGEROUS, f"suspends the machine ({n})", c.shown)
        elif not opts or any(x in opts or x.startswith(opts) for x in a):
            yield Hit(HARDLINE, "power off / reboot", c.shown)
    elif n in ("virsh", "vboxmanage", "vagrant", "multipass", "qm", "pct", "prlctl", "vmrun", "lxc", "incus",
               "lxc-stop", "xl"):
        text = " ".join(x.lower() for x in a)
        if re.search(r"\b(shutdown|reboot|destroy|undefine|reset|poweroff|halt|stop|suspend|delete|unregistervm|"
                     r"kill|managedsave|purge)\b", text) or n == "lxc-stop":
            yield Hit(DANGEROUS, f"stops, resets or deletes a virtual machine ({n})", c.shown)


# ---------------------------------------------------------------- other processes

_EVERYONE = {".", ".*", "", "^", "$", ".+"}


def r_processes_more(c: Call) -> Iterator[Finding]:
    n, a = c.name, c.args
    if n == "killall5":
        yield Hit(HARDLINE, "killing every process / init", c.shown)
    elif n in ("pkill", "killall", "skill"):
        a = [x for x in a if not re.fullmatch(r"-(SIG)?[A-Z]+[0-9]*|-\d+", x)]  # -9, -KILL, -HUP: the signal
        o = parse(a, "sUuGgPtFn" if n == "pkill" else "usonyY", ("signal", "euid", "uid", "user", "pgroup", "parent",
                                                                  "terminal", "pidfile", "older", "younger"))
        users = o.vals.get("u", []) + o.vals.get("U", []) + o.longs.get("euid", []) + o.longs.get("uid", []) + \
            o.longs.get("user", [])
        patterns = o.pos
        if users and not patterns or any(p in _EVERYONE for p in patterns):
            yield Hit(HARDLINE, "killing every process of a user, or all of them", c.shown)
    elif n in ("gcore", "pstack", "eu-stack") or n == "gdbserver" and "--attach" in a:
        yield Hit(DANGEROUS, "attaches to a running process (reads or changes its memory)", c.shown)
    elif n == "cpulimit" and any(x in ("-p", "--pid") for x in a):
        yield Hit(DANGEROUS, "throttles another process", c.shown)


def r_proc_memory(c: Call) -> Iterator[Finding]:
    if any(re.fullmatch(r"/proc/[^/]+/(mem|maps|pagemap|syscall)", x.partition("=")[2] or x) for x in c.args):
        yield Hit(DANGEROUS, "reads another process's memory", c.shown)


# ---------------------------------------------------------------- privilege and permissions

def r_privilege(c: Call) -> Iterator[Finding]:
    n, a = c.name, c.args
    if n == "setcap" and not any(x in ("-v", "--verify") for x in a):
        yield Hit(DANGEROUS, "grants a program capabilities (setcap)", c.shown)
    elif n == "gpasswd" and any(x in ("-a", "--add", "-M", "--members", "-A", "--administrators", "-r", "-R")
                                for x in a):
        yield Hit(DANGEROUS, "user account change", c.shown)
    elif n in ("groupadd", "groupmod", "addgroup") and a:
        yield Hit(DANGEROUS, "user account change", c.shown)
    elif n == "machinectl" and any(x in ("shell", "login") for x in a):
        yield Hit(DANGEROUS, "interactive root shell: machinectl", c.shown)


_READABLE = lazy_re(r"^(?:[0-7]?[0-7][4-7][0-7]|[0-7]?[0-7][0-7][4-7])$|(?:^|,)[ugoa]*[goa][ugoa]*[+=][^,]*r")


def r_permissions_more(c: Call) -> Iterator[Finding]:
    a = c.args
    targets = [x for x in a if not x.startswith("-")]
    if c.name == "chmod" and len(targets) >= 2:
        mode, files = targets[0], targets[1:]
        if _READABLE.search(mode) and any(secret_label(f) for f in files):
            yield Hit(DANGEROUS, "makes a secret readable by other users", c.shown)
        elif any(re.fullmatch(r"(/var)?/run/docker\.sock", f) for f in files):
            yield Hit(DANGEROUS, "opens the docker socket (root access) to other users", c.shown)
    elif c.name == "setfacl" and not any(x in ("--test",) for x in a):
        recursive = any(x in ("-R", "--recursive") or re.fullmatch(r"-[a-zA-Z]*R[a-zA-Z]*", x) for x in a)
        if recursive and any(is_critical(f) for f in targets):
            yield Hit(HARDLINE, "recursive permission change on / or home", c.shown)
        elif recursive or any(sensitive_label(f) or secret_label(f) or is_system(f) for f in targets):
            yield Hit(DANGEROUS, "changes who may read or write a protected file (setfacl)", c.shown)


# ---------------------------------------------------------------- registry

RULES = by_name(
    (tuple(_SET_VERBS) + ("hostname", "sysctl", "modprobe", "mount", "ip", "nmcli", "ifconfig", "dpkg", "rpm",
                          "chattr", "journalctl", "dmesg", "auditctl", "ethtool", "systemctl", "launchctl"),
     r_system),
    (("ddrescue", "badblocks", "mdadm", "zpool", "zfs", "btrfs", "fsck.ext4", "fsck.xfs", "fsck.vfat")
     + tuple(_VOLUME_TOOLS), r_disks_more),
    (("systemctl",) + tuple(_DESKTOP_POWER) + ("virsh", "vboxmanage", "vagrant", "multipass", "qm", "pct",
                                                "prlctl", "vmrun", "lxc", "incus", "lxc-stop", "xl"), r_power_more),
    (("killall5", "pkill", "killall", "skill", "gcore", "gdbserver", "pstack", "eu-stack", "cpulimit"),
     r_processes_more),
    (("cat", "dd", "xxd", "od", "hexdump", "strings", "head", "tail", "cp", "python", "python3", "less"),
     r_proc_memory),
    (("setcap", "gpasswd", "groupadd", "groupmod", "addgroup", "machinectl"), r_privilege),
    (("chmod", "setfacl"), r_permissions_more))
