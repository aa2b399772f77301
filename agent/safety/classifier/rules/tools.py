"""Rules over everyday tools, filed by command name in `registry`: git (force pushes, hard resets, discarded work,
destroyed recovery data, rewritten history), system administration (crontabs, accounts, firewalls, network
interfaces, package removal, network shells), package publishing (it cannot be undone), SQL and NoSQL clients
(their SQL is handed to `sql`), and which files a downloader saves (`download_info`).
"""

from __future__ import annotations

import re
from typing import Iterator

from agent.safety.classifier.vocabulary import DANGEROUS, HARDLINE, Call, Finding, Hit, Recurse, parse


# ---------------------------------------------------------------- git

def r_git(c: Call) -> Iterator[Finding]:
    g = parse(c.args, short="Cc", long=("git-dir", "work-tree", "namespace", "exec-path", "config-env"), stop=True)
    if not g.rest:
        return
    sub, sargs = g.rest[0], g.rest[1:]
    o = parse(sargs, short="oCmF" if sub == "commit" else "o", long=("push-option", "repo", "receive-pack", "exec"))
    bad = None
    if sub == "push":
        refs = o.pos[1:]
        if o.has("f", "force", "force-with-lease", "mirror") or any(r.startswith("+") for r in refs):
            bad = "force push"
        elif o.has("d", "delete", "prune") or any(r.startswith(":") for r in refs):
            bad = "deleting remote branches"
    elif sub == "reset" and o.has("hard"):
        bad = "git reset --hard"
    elif sub == "clean" and o.has("f", "force") and not o.has("n", "dry-run"):
        bad = "git clean -f"
    elif sub == "branch" and (o.has("D") or (o.has("d", "delete") and o.has("f", "force"))):
        bad = "force-deleting a branch"
    elif sub == "checkout" and (o.has("f", "force") or any(p in (".", ":/", "*") for p in o.pos)):
        bad = "discarding working-tree changes"
    elif sub == "restore" and not (o.has("S", "staged") and not o.has("W", "worktree")) and any(
            p in (".", ":/", "*") for p in o.pos):
        bad = "discarding working-tree changes"
    elif (sub == "stash" and o.pos[:1] == ["clear"]) or (sub == "reflog" and o.pos[:1] in (["expire"], ["delete"])):
        bad = "destroying recovery data"
    elif sub == "gc" and any(v in ("now", "all") for v in o.longs.get("prune", [])):
        bad = "destroying recovery data"
    elif sub in ("filter-branch", "filter-repo"):
        bad = "rewriting history"
    if bad:
        yield Hit(DANGEROUS, bad, c.shown)


# ---------------------------------------------------------------- system administration

def r_crontab(c: Call) -> Iterator[Finding]:
    o = parse(c.args, short="uc")
    if o.has("r"):
        yield Hit(DANGEROUS, "removing the crontab", c.shown)
    elif o.has("e"):
        yield Hit(DANGEROUS, "editing the crontab", c.shown)
    elif not o.has("l", "V", "T", "help"):
        yield Hit(DANGEROUS, "installing a crontab", c.shown)


def r_admin(c: Call) -> Iterator[Finding]:
    n, a = c.name, c.args
    if n in ("visudo", "vipw", "vigr"):
        if not any(x in ("-c", "--check") for x in a):
            yield Hit(DANGEROUS, "editing sudoers/accounts", c.shown)
    elif n in ("userdel", "deluser", "groupdel", "delgroup", "usermod", "passwd", "chpasswd", "useradd", "adduser"):
        if not (n == "passwd" and any(x in ("-S", "--status") for x in a)):
            yield Hit(DANGEROUS, "user account change", c.shown)
    elif n in ("iptables", "ip6tables", "iptables-legacy", "iptables-nft"):
        if any(x in ("-F", "--flush", "-X", "--delete-chain") for x in a) or (
                any(x in ("-P", "--policy") for x in a) and any(x in ("DROP", "REJECT") for x in a)):
            yield Hit(DANGEROUS, "firewall flush / lockout", c.shown)
    elif n == "nft" and "flush" in a:
        yield Hit(DANGEROUS, "firewall flush / lockout", c.shown)
    elif n == "ufw" and [x for x in a if not x.startswith("-")][:1] in (["disable"], ["reset"]):
        yield Hit(DANGEROUS, "firewall flush / lockout", c.shown)
    elif (n == "ip" and "link" in a[:2] and "down" in a) or (n == "ifconfig" and "down" in a) or n == "ifdown" or (
            n == "nmcli" and "off" in a):
        yield Hit(DANGEROUS, "taking the network down", c.shown)
    elif n in ("apt", "apt-get", "aptitude", "dnf", "yum", "microdnf", "zypper", "apk", "snap", "pacman"):
        if any(x in ("remove", "purge", "autoremove", "autopurge", "erase", "rm", "del") for x in a) or (
                n == "pacman" and any(re.fullmatch(r"-R\w*", x) for x in a)):
            yield Hit(DANGEROUS, "system package removal", c.shown)
    elif n in ("nc", "ncat", "netcat") and any(x in ("-e", "-c", "--exec", "--sh-exec") or x.startswith("-e") for x in a):
        yield Hit(DANGEROUS, "network shell (nc -e)", c.shown)
    elif n == "socat" and any(re.match(r"(?i)(exec|system):", x) for x in a):
        yield Hit(DANGEROUS, "network shell (socat exec)", c.shown)
    elif n == "launchctl" and a[:1] in (["unload"], ["bootout"], ["remove"], ["reboot"]):
        yield Hit(HARDLINE if a[0] == "reboot" else DANGEROUS, f"launchctl {a[0]}", c.shown)


PUBLISH = {"npm": ("publish", "unpublish", "deprecate"), "pnpm": ("publish",), "yarn": ("publish", "npm"),
            "cargo": ("publish", "yank"), "twine": ("upload",), "gem": ("push", "yank"), "poetry": ("publish",),
            "flit": ("publish",), "uv": ("publish",), "hatch": ("publish",), "rye": ("publish",)}


def r_publish(c: Call) -> Iterator[Finding]:
    words = [a for a in c.args if not a.startswith("-")]
    if words and words[0] in PUBLISH.get(c.name, ()):
        if not (c.name == "yarn" and words[0] == "npm" and "publish" not in words[1:2]):
            yield Hit(DANGEROUS, "publishing a package", c.shown)


# ---------------------------------------------------------------- databases

def r_sql_client(c: Call) -> Iterator[Finding]:
    n, a = c.name, c.args
    if n == "redis-cli":
        if any(x.upper() in ("FLUSHALL", "FLUSHDB") for x in a) or re.search(r"(?i)\bflush(all|db)\b", c.stdin or ""):
            yield Hit(DANGEROUS, "redis flush", c.shown)
        return
    if n in ("mongo", "mongosh"):
        js = " ".join(v for v in parse(a, long=("eval",)).longs.get("eval", [])) + (c.stdin or "")
        if re.search(r"dropDatabase\(|shutdownServer\(|\.drop\(\s*\)|(?:deleteMany|remove)\(\s*\{\s*\}\s*\)", js):
            yield Hit(DANGEROUS, "dropping mongo data", c.shown)
        return
    spec = {"psql": ("c", ("command",)), "mysql": ("e", ("execute",)), "mariadb": ("e", ("execute",)),
            "duckdb": ("c", ("c",)), "clickhouse-client": ("q", ("query",)), "sqlcmd": ("Qq", ()),
            "cqlsh": ("e", ("execute",)), "sqlite3": ("", ())}[n]
    if n == "sqlite3":  # sqlite3 [options] DB [SQL...]; single-dash long options
        sql, pos, i = [], [], 0
        while i < len(a):
            if a[i] in ("-cmd",) and i + 1 < len(a):
                sql.append(a[i + 1])
                i += 1
            elif a[i] in ("-separator", "-nullvalue", "-newline", "-init") and i + 1 < len(a):
                i += 1
            elif not a[i].startswith("-"):
                pos.append(a[i])
            i += 1
        sql += pos[1:]
        via = "sqlite3"
        if not sql and c.stdin:
            sql, via = [c.stdin], "stdin of sqlite3"
    else:
        o = parse(a, short=spec[0] + ("dUhPfuWDSHEo" if n in ("mysql", "mariadb") else "dUhpPfuWDSHEo"),
                  long=spec[1] + ("dbname", "username", "host", "port", "file",
                                                                       "user", "password", "database"))
        sql = [v for k in spec[0] for v in o.vals.get(k, [])] + [v for k in spec[1] for v in o.longs.get(k, [])]
        if n == "duckdb":
            sql += o.pos[1:]
        via = f"{n} -{spec[0][0]}"
        if not sql and c.stdin and (not o.has("f", "file") or o.val("f", "file") == "-"):
            sql, via = [c.stdin], f"stdin of {n}"
    for s in sql:
        yield Recurse("sql", s, via)


# ---------------------------------------------------------------- downloads

def download_info(name: str, args: list[str]) -> tuple[bool, list[str]]:
    """(writes to stdout?, paths of the files it saves) for a downloader."""
    def base(url: str) -> str:
        path = re.sub(r"^\w+://[^/]*", "", url).split("?")[0].split("#")[0]
        return path.rstrip("/").rsplit("/", 1)[-1] or "index.html"
    if name == "curl":
        o = parse(args, short="AbcCdDeEFHKmoPQrTtuUwxXyYz", long=(
            "output", "data", "header", "request", "user", "user-agent", "referer", "config", "range", "upload-file",
            "write-out", "proxy", "cookie", "cookie-jar", "dump-header", "form", "max-time", "connect-timeout",
            "retry", "output-dir", "data-raw", "data-binary", "data-urlencode", "json", "url", "cacert", "cert"))
        urls = [p for p in o.pos + o.longs.get("url", []) if "://" in p or "." in p]
        outs = [v for v in o.vals.get("o", []) + o.longs.get("output", []) if v != "-"]
        if o.has("O", "remote-name", "remote-name-all"):
            outs += [base(u) for u in urls]
        return not outs, outs
    if name == "wget":
        o = parse(args, short="OoaPtTwUeiBQlD", long=("output-document", "output-file", "directory-prefix", "tries",
                                                      "timeout", "user-agent", "header", "input-file", "level"))
        doc = o.val("O", "output-document")
        if doc == "-":
            return True, []
        return False, [doc] if doc else [base(u) for u in o.pos]
    if name in ("fetch", "aria2c"):
        o = parse(args, short="od", long=("out", "output", "dir"))
        out = o.val("o", "out", "output")
        return False, [out] if out else [base(u) for u in o.pos]
    return True, []
