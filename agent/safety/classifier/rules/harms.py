"""Rules for whole categories of harm, by what a command does rather than by its exact text.

Each rule gets one normalised simple command (`Call`) and yields `Hit`s. The categories: reading
secrets (which paths are secrets: `paths.secret_label`); stopping or restarting services and process
managers; destroying databases through their own CLIs and frameworks' management commands; filling
disks or memory; firmware and disk-erase tools; power-off through D-Bus, IPMI or the RTC; processes
started to outlive the command; settings that make code run later (global git config, package-manager
credentials); chatgate's own CLI.
"""

from __future__ import annotations

import re
from typing import Iterator

from agent.safety.classifier.lazy import lazy_re
from agent.safety.classifier.paths import secret_label, secrets_file
from agent.safety.classifier.vocabulary import DANGEROUS, HARDLINE, Call, Finding, Hit, Recurse, by_name, parse, \
    size_bytes

# ---------------------------------------------------------------- secrets

_READERS = frozenset("""cat tac less more head tail nl base64 base32 basenc xxd od hexdump strings grep egrep fgrep
    rg ag awk gawk sed cut sort uniq tr cp scp rsync tar zip 7z gzip bzip2 xz zstd curl wget nc ncat socat openssl
    gpg python python3 perl ruby node jq yq sqlite3 dd install unshadow view vim vi nano ed diff cmp md5sum sha256sum
    bat batcat pr fold paste join split csplit look rev tee""".split())
_NOT_READING = {"ssh-keygen", "ssh-add", "ssh", "chmod", "chown", "ls", "stat", "test", "file"}


def r_secret_reads(c: Call) -> Iterator[Finding]:
    """Reading a secret file: its content goes to the model (and from there anywhere). A file of the
    workspace that holds secrets (`.env`, `server.key`, `credentials.json`) counts when it is printed."""
    if c.name in _NOT_READING or c.name not in _READERS:
        return
    pattern = _search_pattern(c) if c.name in _SEARCHERS else None
    for arg in c.args:
        for part in re.split(r"[=,]", arg) if arg.startswith("-") or "=@" in arg else [arg]:
            label = secret_label(part) or (c.name in _PRINTERS and arg is not pattern and secrets_file(part)
                                           and "a secrets file")
            if label:
                yield Hit(DANGEROUS, f"reads {label}", c.shown)
                return


_SEARCHERS = frozenset("grep egrep fgrep rg ag".split())


def _search_pattern(c: Call) -> str | None:
    """The pattern argument of grep/rg (not a file it reads), when given as the first positional."""
    o = parse(c.args, "efmABCdDgt", ("regexp", "file", "max-count", "include", "exclude", "glob", "type"))
    if not o.pos or o.vals.get("e") or o.vals.get("f") or o.longs.get("regexp") or o.longs.get("file"):
        return None
    return next(a for a in c.args if a == o.pos[0])  # (the very string: `arg is pattern` skips only it)


_PRINTERS = _READERS - frozenset("cp scp rsync tar zip 7z gzip bzip2 xz zstd curl wget nc ncat socat gpg python "
                                 "python3 perl ruby node install tee split csplit dd sqlite3 vim vi view nano".split())


# ---------------------------------------------------------------- services and process managers

_STOPPING = {
    "supervisorctl": {"stop", "restart", "shutdown", "remove", "reload", "signal", "clear"},
    "pm2": {"stop", "delete", "del", "kill", "restart", "reload", "flush", "reset", "unstartup"},
    "apachectl": {"stop", "restart", "graceful-stop", "graceful"}, "apache2ctl": {"stop", "restart", "graceful-stop"},
    "pg_ctl": {"stop", "restart", "kill", "promote"}, "pg_ctlcluster": {"stop", "restart"},
    "rabbitmqctl": {"stop", "stop_app", "reset", "force_reset", "shutdown", "delete_queue", "purge_queue",
                    "delete_vhost", "delete_user"},
    "sv": {"stop", "down", "kill", "restart", "exit", "force-stop", "force-restart"},
    "s6-svc": {"-d", "-k", "-x", "-r"}, "forever": {"stop", "stopall", "restart", "restartall"},
    "monit": {"stop", "restart", "unmonitor"}, "circusctl": {"stop", "restart", "quit", "rm"},
    "nssm": {"stop", "restart", "remove"}, "sc": {"stop", "delete"}, "launchctl": {"unload", "bootout", "stop",
                                                                                    "remove", "kill"},
}


def r_service_managers(c: Call) -> Iterator[Finding]:
    verbs = _STOPPING.get(c.name, set())
    words = [a for a in c.args if not a.startswith("-") or c.name == "s6-svc"]
    if any(w in verbs for w in words[:3]):
        yield Hit(DANGEROUS, f"stopping or restarting services ({c.name})", c.shown)


def r_server_signals(c: Call) -> Iterator[Finding]:
    """nginx -s stop, haproxy -sf, …: a server told to stop or reload."""
    o = parse(c.args, short="sgcpe")
    if c.name in ("nginx", "openresty") and o.val("s") in ("stop", "quit", "reload"):
        yield Hit(DANGEROUS, f"{c.name} -s {o.val('s')}", c.shown)
    elif c.name in ("httpd", "apache2") and "-k" in c.args:
        yield Hit(DANGEROUS, f"{c.name} -k", c.shown)


# ---------------------------------------------------------------- databases

_DB_TASKS = lazy_re(r"db:(drop|reset|purge|truncate_all|schema:load|structure:load|migrate:reset|seed:replant)"
                    r"|migrate:(fresh|reset|refresh|rollback)|db:wipe|doctrine:(database:drop|schema:drop)"
                    r"|schema:drop|reset_db|sqlflush|^flush$|^ecto\.(drop|reset)$|db:migrate:undo:all")
_FRAMEWORKS = frozenset("rails rake bin/rails artisan manage.py django-admin console bin/console sequelize "
                        "sequelize-cli typeorm knex prisma alembic flask mix".split())


_MIGRATION_TOOLS = {"flyway": ("clean",), "liquibase": ("dropall", "drop-all", "rollback-count", "rollbackcount"),
                    "diesel": ("database reset", "database drop", "migration redo --all", "migration revert --all"),
                    "sqlx": ("database drop", "database reset"), "migrate": ("drop", "down"),
                    "dotnet": ("ef database drop",), "goose": ("reset", "down-to 0"), "dbmate": ("drop", "rollback"),
                    "atlas": ("schema clean",)}


def r_db_cli(c: Call) -> Iterator[Finding]:
    a = [x.lower() for x in c.args if not x.startswith("-")]
    if c.name in ("dropdb", "dropuser", "dropcluster", "pg_dropcluster"):
        yield Hit(DANGEROUS, f"{c.name}: deletes a database", c.shown)
    elif c.name == "mysqladmin" and {"drop", "shutdown", "flush-hosts"} & set(a):
        yield Hit(DANGEROUS, "mysqladmin drop/shutdown", c.shown)
    elif c.name == "mongorestore" and "--drop" in c.args or c.name == "pg_restore" and any(
            x in ("-c", "--clean") or x.startswith("-") and not x.startswith("--") and "c" in x[1:] for x in c.args):
        yield Hit(DANGEROUS, f"{c.name}: drops what it restores over", c.shown)
    elif c.name in _MIGRATION_TOOLS and any(f" {v} " in f" {' '.join(a)} " for v in _MIGRATION_TOOLS[c.name]):
        yield Hit(DANGEROUS, f"{c.name}: destroys the database or its schema", c.shown)
    elif c.name in ("influx", "arangosh", "cockroach") and any(w in ("drop", "delete") for w in a):
        yield Hit(DANGEROUS, f"{c.name} deletes data", c.shown)
    if c.name == "cockroach":
        for v in parse(c.args, "e", ("execute",)).vals.get("e", []) + parse(c.args, "e", ("execute",)).longs.get(
                "execute", []):
            yield Recurse("sql", v, "cockroach sql -e")


def framework_task(words: list[str]) -> str | None:
    """`rails db:drop`, `python manage.py flush`, `php artisan migrate:fresh`, … → the task."""
    for k, w in enumerate(words):
        if w in _FRAMEWORKS or w.endswith("manage.py"):
            rest = [x for x in words[k + 1:] if not x.startswith("-")]
            if not rest:
                return None
            task = rest[0].lower()
            if w == "prisma" and rest[:2] in (["migrate", "reset"], ["db", "push"]) and (
                    rest[:2] == ["migrate", "reset"] or {"--force-reset", "--accept-data-loss"} & set(words)):
                return " ".join(rest[:2])
            if w == "alembic" and task == "downgrade":
                return "downgrade"
            if w == "knex" and task == "migrate:rollback" and "--all" in words:
                return task
            if w == "flask" and rest[:2] == ["db", "downgrade"]:
                return "db downgrade"
            if _DB_TASKS.search(task):
                return task
    return None


def r_framework(c: Call) -> Iterator[Finding]:
    task = framework_task([c.raw0 or c.name, *c.args])
    if task:
        yield Hit(DANGEROUS, f"destroys database data ({task})", c.shown)


# ---------------------------------------------------------------- filling disks and memory

def r_fill(c: Call) -> Iterator[Finding]:
    big = 8 * 1024 ** 3
    if c.name == "fallocate":
        size = parse(c.args, short="lon").val("l", "length")
        if size and (size_bytes(size) or 0) >= big:
            yield Hit(DANGEROUS, "fills the disk (fallocate)", c.shown)
    elif c.name in ("stress", "stress-ng", "memtester"):
        yield Hit(DANGEROUS, f"exhausts CPU or memory ({c.name})", c.shown)
    elif c.name == "dd":
        ops = dict(a.split("=", 1) for a in c.args if "=" in a)
        source = ops.get("if", "")
        if source in ("/dev/zero", "/dev/urandom", "/dev/random") and "of" in ops:
            count = ops.get("count")
            block = size_bytes(ops.get("bs", "512")) or 512
            if count is None or block * (size_bytes(count) or 0) >= big:
                yield Hit(DANGEROUS, "fills the disk (dd from /dev/zero)", c.shown)
    elif c.name == "head" and {"/dev/zero", "/dev/urandom"} & set(c.args) and any(
            (size_bytes(v) or 0) >= big for v in c.args if not v.startswith("-")):
        yield Hit(DANGEROUS, "fills the disk (head -c)", c.shown)


# ---------------------------------------------------------------- firmware and disk erase

def r_firmware(c: Call) -> Iterator[Finding]:
    a = set(c.args)
    if c.name == "flashrom" and (a & {"-w", "--write", "-E", "--erase"} or any(x.startswith("--write=") for x in a)):
        yield Hit(HARDLINE, "rewrites firmware (flashrom)", c.shown)
    elif c.name in ("fwupdmgr", "fwupdtool") and a & {"update", "install", "downgrade", "reinstall", "unlock",
                                                       "install-blob", "activate"}:
        yield Hit(DANGEROUS, "firmware update", c.shown)
    elif c.name == "nvme" and a & {"format", "sanitize", "delete-ns", "fw-download", "fw-commit"}:
        yield Hit(HARDLINE, "erases or reflashes an NVMe drive", c.shown)
    elif c.name == "hdparm" and any(x.startswith(("--security-erase", "--trim-sector-ranges", "--fwdownload",
                                                  "--security-set-pass", "--make-bad-sector")) for x in a):
        yield Hit(HARDLINE, "erases a disk (hdparm)", c.shown)
    elif c.name in ("sg_format", "sg_sanitize", "sg_write_buffer"):
        yield Hit(HARDLINE, f"erases a disk ({c.name})", c.shown)
    elif c.name == "efibootmgr" and a & {"-B", "--delete-bootnum", "-o", "--bootorder", "-O", "--delete-bootorder"}:
        yield Hit(DANGEROUS, "changes the boot entries", c.shown)
    elif c.name == "mokutil" and a & {"--import", "--delete", "--reset", "--disable-validation"}:
        yield Hit(DANGEROUS, "changes Secure Boot keys", c.shown)


# ---------------------------------------------------------------- power through buses and the RTC

_POWER_METHOD = lazy_re(r"\b(PowerOff|Reboot|Halt|KExec|Suspend|Hibernate|HybridSleep|SuspendThenHibernate"
                        r"|ScheduleShutdown|RequestShutdown|RequestReboot)\b")


def r_power_bus(c: Call) -> Iterator[Finding]:
    text = " ".join(c.args)
    if c.name in ("dbus-send", "busctl", "gdbus", "qdbus", "qdbus6", "dbus") and _POWER_METHOD.search(text):
        yield Hit(HARDLINE, "power off / reboot over D-Bus", c.shown)
    elif c.name == "ipmitool" and re.search(r"\b(power\s+(off|cycle|reset|soft|down)|mc\s+reset)\b", text):
        yield Hit(HARDLINE, "power off / reset through IPMI", c.shown)
    elif c.name == "rtcwake" and (parse(c.args, short="mdstA", long=("mode", "seconds", "time", "device")).val(
            "m", "mode") or "standby") in ("off", "mem", "disk", "freeze", "standby"):  # (standby is the default)
        yield Hit(HARDLINE, "power off / suspend through the RTC", c.shown)


# ---------------------------------------------------------------- outliving the command

def r_detach(c: Call) -> Iterator[Finding]:
    if c.name in ("setsid", "nohup", "disown", "daemonize", "start-stop-daemon", "systemd-run", "at", "batch"):
        yield Hit(DANGEROUS, f"starts something that outlives the command ({c.name})", c.shown)
    elif c.name == "screen" and any(a.startswith("-d") and "m" in a for a in c.args) or \
            c.name == "tmux" and {"new", "new-session", "new-window"} & set(c.args) and "-d" in c.args:
        yield Hit(DANGEROUS, f"starts something that outlives the command ({c.name} detached)", c.shown)


# ---------------------------------------------------------------- settings that run code later

_GIT_CODE_KEYS = lazy_re(r"(core\.(hookspath|sshcommand|pager|editor|fsmonitor|askpass|gitproxy)"
                         r"|credential\..*helper|url\..*\.insteadof|include\.path|includeif\..*|alias\..*"
                         r"|filter\..*\.(clean|smudge|process)|diff\..*\.textconv|sequence\.editor)$", re.I)


def r_git_config(c: Call) -> Iterator[Finding]:
    if c.name != "git":
        return
    words = [a for a in c.args if not a.startswith("-")]
    if not words or words[0] != "config":
        return
    scope = {"--global", "--system"} & set(c.args)
    key = next((w for w in words[1:] if "." in w), "")
    always = re.match(r"core\.(hookspath|fsmonitor|sshcommand)|include|credential", key, re.I)  # even in this repo
    if key and _GIT_CODE_KEYS.match(key) and (len(words) > 2 or "--add" in c.args) and (scope or always) and \
            not (key.lower().startswith("alias.") and not "".join(words[2:3]).startswith("!")):
        yield Hit(DANGEROUS, f"git config {key}: makes git run a program" + (" everywhere" if scope else ""), c.shown)


def r_redis(c: Call) -> Iterator[Finding]:
    words = [a.lower() for a in c.args]
    if any(a in ("shutdown", "flushall", "flushdb", "debug") for a in words):
        yield Hit(DANGEROUS, "redis shutdown / flush", c.shown)
    elif "config" in words and "set" in words and {"dir", "dbfilename", "requirepass", "masterauth", "protected-mode"} \
            & set(words) or {"module", "slaveof", "replicaof"} & set(words[:3]):
        yield Hit(DANGEROUS, "redis made to write files, load code or change who may connect", c.shown)
    elif c.bulk and {"del", "unlink"} & set(words):
        yield Hit(DANGEROUS, "bulk delete of redis keys", c.shown)


def r_credentials_config(c: Call) -> Iterator[Finding]:
    if c.name in ("npm", "pnpm", "yarn") and "config" in c.args and "set" in c.args and \
            any(re.search(r"_auth|token|registry", a, re.I) for a in c.args):
        yield Hit(DANGEROUS, f"{c.name} credentials or registry changed", c.shown)
    elif c.name in ("pip", "pip3") and "config" in c.args and "set" in c.args and \
            any(re.search(r"index-url|trusted-host", a) for a in c.args):
        yield Hit(DANGEROUS, "pip package index changed", c.shown)


# ---------------------------------------------------------------- chatgate itself

_CHATGATE_HARMLESS = (("approvals", "check"), ("--help",), ("-h",), ("--version",), ("help",))


def r_chatgate_cli(c: Call) -> Iterator[Finding]:
    """chatgate's own CLI changes who is paired, what is approved, what is remembered and what runs
    when, and prints the web chat's link with its token: the agent using it is a person's call."""
    words = tuple(a for a in c.args if a not in ("-q", "--quiet"))
    if not any(words[:len(h)] == h for h in _CHATGATE_HARMLESS):
        yield Hit(DANGEROUS, "runs chatgate's own CLI (pairing, approvals, memory, jobs, its tokens)", c.shown)


RULES = by_name(
    (_READERS, r_secret_reads),
    (_STOPPING, r_service_managers), (("nginx", "openresty", "httpd", "apache2"), r_server_signals),
    (("dropdb", "dropuser", "dropcluster", "pg_dropcluster", "mysqladmin", "mongorestore", "influx", "arangosh",
      "cockroach", "pg_restore", "flyway", "liquibase", "diesel", "sqlx", "migrate", "dotnet", "goose", "dbmate",
      "atlas"), r_db_cli),
    (("rails", "rake", "php", "python", "python3", "bundle", "npx", "django-admin", "sequelize", "sequelize-cli",
      "typeorm", "knex", "prisma", "alembic", "flask", "mix", "artisan", "yarn", "pnpm"), r_framework),
    (("fallocate", "stress", "stress-ng", "memtester", "dd", "head"), r_fill),
    (("flashrom", "fwupdmgr", "fwupdtool", "nvme", "hdparm", "sg_format", "sg_sanitize", "sg_write_buffer",
      "efibootmgr", "mokutil"), r_firmware),
    (("dbus-send", "busctl", "gdbus", "qdbus", "qdbus6", "dbus", "ipmitool", "rtcwake"), r_power_bus),
    (("setsid", "nohup", "disown", "daemonize", "start-stop-daemon", "systemd-run", "at", "batch", "screen",
      "tmux"), r_detach),
    (("git",), r_git_config), (("redis-cli", "valkey-cli", "keydb-cli"), r_redis),
    (("npm", "pnpm", "yarn", "pip", "pip3"), r_credentials_config),
    (("chatgate",), r_chatgate_cli))
