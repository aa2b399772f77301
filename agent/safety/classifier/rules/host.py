"""What a command does to this machine as a whole: files and packages it cannot boot or let anyone log in
without, its boot code, its disks read raw, and sessions that act as another user. Rules over normalised
commands (`Call`), filed by command name in `registry`.

The principles:

* Vital files: destroying — deleting, emptying, moving away — a file without which the machine does not
  boot or nobody can log in at all (/etc/passwd, /etc/fstab, PAM's configuration, the kernel and initramfs, the boot
  loader, the dynamic loader and libc, init, /bin/sh) is hardline when it runs with root privileges
  (sudo, doas, su, pkexec, runuser, ssh root@): that is the only way it succeeds. Unprivileged it stays
  dangerous, as the project's corpus labels `truncate -s 0 /etc/passwd`: the write fails. Files whose loss
  still leaves a way in (/etc/shadow: key logins work; sudoers: root's own login) stay dangerous too.
* Essential packages: removing one the system cannot run without (libc, systemd, coreutils, bash, the
  package manager itself, the boot loader) is hardline; other removals stay dangerous. A named kernel is
  routinely removed and package managers keep the running one, so it stays dangerous (`dnf remove
  kernel-core`); a glob over every kernel (`apt purge 'linux-image-*'`, `dnf remove 'kernel*'`) takes the running
  one and every fallback with it, leaving nothing to boot: hardline. `rpm -e` stays dangerous: the project's
  corpus labels `rpm -e --nodeps glibc` dangerous.
* A user's home deleted with the account (`userdel -r`, `deluser --remove-home`, `--remove-all-files`, macOS
  `sysadminctl -deleteUser`) is a recursive delete of a home folder, hardline as `rm -rf ~` and `rm -rf
  /home/alice` are; removing the account alone stays dangerous (`userdel bob`).
* Boot code: `grub-install --force` writes boot code over whatever is in its way (the check it skips is
  there for that): hardline. Without --force it refuses instead, and stays dangerous.
* Raw disks: reading a disk or memory device with root privileges (`sudo dd if=/dev/sda of=x.img`, `sudo
  cat /dev/nvme0n1 | ...`) reads every file on it past all permissions, every user's secrets: dangerous.
  Unprivileged, the device's own permissions decide (the project's corpus keeps `dd if=/dev/sda of=x`
  safe); a read of at most 1 MiB (a partition table, a boot sector) is not flagged. A name made for a
  device (`ln -s /dev/sda disk.img`, `mknod`) is dangerous: writes to the harmless name reach the disk.
* Sessions as another user: an interactive shell, interpreter or database console started through
  sudo or su (`sudo -u postgres psql`, `sudo python3`) can do anything that user can, and none of it is
  in the command line: dangerous. The same program given its work (`psql -c ...`, a script, piped
  input) is judged by that work.
* A umask that lets other users write the files created from now on (`umask 000`, `umask o+w`): dangerous.
"""

from __future__ import annotations

import fnmatch
import re
from typing import Iterator

from agent.safety.classifier.lazy import lazy_re
from agent.safety.classifier.paths import is_device, norm_path
from agent.safety.classifier.vocabulary import DANGEROUS, HARDLINE, Call, Finding, Hit, by_name, parse, size_bytes

_VITAL = lazy_re(r"/etc/(passwd|fstab)|/etc/pam\.d(/.*)?|/boot/(vmlinuz|initrd|initramfs|grub|efi|loader)[^/]*(/.*)?|/efi(/.*)?"
                 r"|/(usr/)?s?bin/(init|sh|bash)|/(usr/)?lib(32|64|/systemd)?/(.*/)?(ld-linux[^/]*|libc\.so[^/]*"
                 r"|libc-[^/]*\.so|systemd)")


def vital(path: str) -> bool:
    """A file the machine cannot boot, or let anyone log in, without."""
    return bool(_VITAL.fullmatch(norm_path(path)))


def _destroyed(c: Call) -> list[str]:
    """The files a command deletes, empties, overwrites or moves away."""
    a = c.args
    if c.name in ("rm", "unlink", "shred"):
        return [x for x in a if not x.startswith("-")]
    if c.name == "truncate":
        return parse(a, "sor", ("size", "reference")).pos
    if c.name == "dd":
        return [x[3:] for x in a if x.startswith("of=")]
    if c.name == "tee" and c.stdin is not None and not any(x in ("-a", "--append") for x in a):  # known text
        return [x for x in a if not x.startswith("-")]
    pos = parse(a, "tSmog", ("target-directory", "suffix", "mode", "owner", "group")).pos
    if c.name == "mv":  # moved away
        return pos[:-1]
    if c.name in ("cp", "install") and pos[:1] in (["/dev/null"], ["/dev/zero"], ["/dev/urandom"]):  # emptied
        return pos[1:]
    return []


_ESSENTIAL = frozenset("""libc6 libc-bin glibc glibc-common base-files base-passwd bash coreutils dash debianutils
    dpkg apt rpm dnf yum pacman apk-tools zypper systemd systemd-sysv init init-system-helpers login passwd util-linux
    mount sed grep tar gzip findutils perl-base libpam-modules libpam-runtime libpam0g pam filesystem setup grub-pc
    grub-efi-amd64 grub-common grub2-common grub2-pc shim-signed libselinux1 libsystemd0 udev busybox musl
    alpine-baselayout""".split())
_KERNELS = ("linux-image-6.8.0-45-generic", "linux-modules-6.8.0-45-generic", "kernel-core-6.8.9-300.fc40.x86_64",
            "kernel-6.8.9-300.fc40.x86_64", "kernel-default-6.4.0-150600.23.7.1")
_REMOVE = {"dpkg": lazy_re(r"-r|-P|--remove|--purge"), "pacman": lazy_re(r"-R\w*|--remove")}
_REMOVE_VERB = lazy_re(r"remove|purge|autoremove|autopurge|erase|rm|del|uninstall")
_MANAGERS = frozenset("apt apt-get aptitude dpkg dnf yum microdnf zypper pacman apk".split())


def r_vital(c: Call) -> Iterator[Finding]:
    """Destroying a vital file with root privileges; removing an essential package; boot code forced."""
    if c.root and any(vital(c.at(t)) for t in _destroyed(c)):
        yield Hit(HARDLINE, "destroys a file the system needs to boot or to let anyone log in", c.shown)
    elif c.name in _MANAGERS and any(_REMOVE.get(c.name, _REMOVE_VERB).fullmatch(x) for x in c.args) and any(
            fnmatch.filter(_ESSENTIAL, x.split(":")[0].split("=")[0]) for x in c.args if not x.startswith("-")):
        yield Hit(HARDLINE, "removes a package the system cannot run without", c.shown)
    elif c.name in _MANAGERS and any(_REMOVE.get(c.name, _REMOVE_VERB).fullmatch(x) for x in c.args) and any(
            re.search(r"[*?\[]", x) and fnmatch.filter(_KERNELS, x) for x in c.args if not x.startswith("-")):
        yield Hit(HARDLINE, "removes every kernel, the running one too (nothing left to boot)", c.shown)
    elif c.name in ("grub-install", "grub2-install") and any(x in ("--force", "-f", "--skip-fs-probe") for x in c.args):
        yield Hit(HARDLINE, "writes boot code over whatever is in its way (grub-install --force)", c.shown)


def r_raw_disk(c: Call) -> Iterator[Finding]:
    """A disk read raw with root privileges; a name made for a device."""
    if c.name in ("ln", "mknod"):
        if c.name == "mknod" or any(is_device(x) for x in parse(c.args, "tS", ("target-directory", "suffix")).pos):
            yield Hit(DANGEROUS, "makes a name for a disk device (writes to it reach the disk)", c.shown)
        return
    if not c.root:
        return
    sources = [x[3:] for x in c.args if x.startswith("if=")] if c.name == "dd" else [
        x for x in c.args if not x.startswith("-")]
    if not any(is_device(s) for s in sources):
        return
    ops = dict(x.split("=", 1) for x in c.args if "=" in x)
    small = c.name == "dd" and "count" in ops and (size_bytes(ops.get("bs", "512")) or 512) * (
        size_bytes(ops["count"]) or 1e12) <= 1024 ** 2 or c.name == "head" and (size_bytes(
            parse(c.args, "cn", ("bytes", "lines")).val("c", "bytes") or "1T") or 1e12) <= 1024 ** 2
    if not small:
        yield Hit(DANGEROUS, "reads a raw disk with root privileges (every file on it, past all permissions)",
                  c.shown)


_CONSOLES = {"psql": ("c", "f", "l", "command", "file", "list"), "mysql": ("e", "execute"),
             "mariadb": ("e", "execute"), "mongosh": ("eval", "file", "f"), "mongo": ("eval",),
             "redis-cli": (), "sqlite3": (), "python": ("c", "m"), "node": ("e", "p", "eval", "print"),
             "perl": ("e", "E"), "ruby": ("e",), "php": ("r", "a", "f"), "irb": (), "lua": ("e",)}


def r_session_as_user(c: Call) -> Iterator[Finding]:
    """`sudo -u postgres psql`, `sudo python3`: a console as another user, fed by no one but a person."""
    if not c.root or c.stdin_kind != "" or any(x in ("--version", "-V", "--help", "-h", "-?") for x in c.args):
        return
    o = parse(c.args, "dUhpPfuWDSHEocemlerRF" if c.name != "python" else "cmWXQ", (
        "dbname", "username", "host", "port", "user", "password", "database", "command", "file", "eval", "execute"))
    work = [k for k in _CONSOLES[c.name] if o.has(k)]
    words = o.pos if c.name not in ("psql", "mysql", "mariadb", "sqlite3") else o.pos[1:]
    if not work and not (words and c.name != "psql"):
        yield Hit(DANGEROUS, f"interactive session as another user ({c.name})", c.shown)


def r_home_removal(c: Call) -> Iterator[Finding]:
    """userdel -r, deluser --remove-home: the account's home folder is deleted with it."""
    a = c.args
    if c.name == "userdel" and any(x in ("--remove", "-r") or re.fullmatch(r"-[a-zA-Z]*r[a-zA-Z]*", x) for x in a) \
            or c.name == "deluser" and any(x in ("--remove-home", "--remove-all-files") for x in a) \
            or c.name == "sysadminctl" and "-deleteUser" in a and "-keepHome" not in a:
        yield Hit(HARDLINE, "deletes a user's home folder with the account (a recursive delete of a home)", c.shown)


def r_umask(c: Call) -> Iterator[Finding]:
    mode = next((x for x in c.args if not x.startswith("-")), "")
    if mode.isdigit() and not int(mode[-1]) & 2 or re.search(r"(^|,)[ugoa]*[oa][ugoa]*[+=][^,]*w", mode):
        yield Hit(DANGEROUS, "lets other users write every file created from now on (umask)", c.shown)


RULES = by_name(
    (("rm", "unlink", "shred", "truncate", "dd", "tee", "cp", "mv", "install", "ln", "grub-install",
      "grub2-install") + tuple(_MANAGERS), r_vital),
    (("dd", "cat", "pv", "cp", "gzip", "xz", "zstd", "xxd", "hexdump", "od", "strings", "head", "tail",
      "partclone.dd", "ln", "mknod"), r_raw_disk),
    (tuple(_CONSOLES), r_session_as_user), (("umask",), r_umask),
    (("userdel", "deluser", "sysadminctl"), r_home_removal))
