"""Rules for the file system: deleting (`rm`, `find -delete`), permissions and ownership (`chmod`, `chown`),
copying, moving and linking (`mv`, `cp`, `install`, `ln`, `rsync`), writing into a file (`tee`, `sed -i`,
`truncate`, `dd of=`), extracting archives (`tar -x`) and shredding. What makes a target bad is in
`paths`: `/` or home wiped is hardline; a sensitive or system file touched is dangerous.
"""

from __future__ import annotations

import re
from typing import Iterator

from agent.safety.classifier.flow import find_pattern
from agent.safety.classifier.paths import is_critical, is_device, is_system, norm_path, sensitive_label, write_risk, \
    writes
from agent.safety.classifier.vocabulary import DANGEROUS, HARDLINE, Call, Finding, Hit, Recurse, parse

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
        yield from writes(c, [dest])


def r_tee(c: Call) -> Iterator[Finding]:
    yield from writes(c, parse(c.args).pos)


def r_sed(c: Call) -> Iterator[Finding]:
    o = parse(c.args, short="efl", long=("expression", "file", "line-length"))
    if o.has("i", "in-place"):
        yield from writes(c, o.pos if o.has("e", "f", "expression", "file") else o.pos[1:])


def r_truncate(c: Call) -> Iterator[Finding]:
    yield from writes(c, parse(c.args, short="sor", long=("size", "reference")).pos)


def r_dd(c: Call) -> Iterator[Finding]:
    for a in c.args:
        if a.startswith("of="):
            yield from writes(c, [a[3:]])


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
