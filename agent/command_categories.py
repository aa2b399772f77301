"""Rules for whole categories of harm, by what a command does rather than by its exact text.

Each rule gets one normalised simple command (`Call`) and yields `Hit`s. The categories: reading
secrets; stopping or restarting services and process managers; destroying databases through their
own CLIs and frameworks' management commands; leaving a container; filling disks or memory;
firmware and disk-erase tools; power-off through D-Bus, IPMI or the RTC; processes started to outlive
the command; settings that make code run later (global git config, package-manager credentials).
`agent.command_rules` registers them by command name; the tables of the other command_* modules are
merged in at the end of this one.
"""

from __future__ import annotations

import re
from typing import Callable, Iterator

from agent.command_rules import DANGEROUS, HARDLINE, Call, Finding, Hit, Recurse, norm_path, parse

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
_SECRET_RE = [(re.compile(p), label) for p, label in _SECRET_FILES]
_READERS = frozenset("""cat tac less more head tail nl base64 base32 basenc xxd od hexdump strings grep egrep fgrep
    rg ag awk gawk sed cut sort uniq tr cp scp rsync tar zip 7z gzip bzip2 xz zstd curl wget nc ncat socat openssl
    gpg python python3 perl ruby node jq yq sqlite3 dd install unshadow view vim vi nano ed diff cmp md5sum sha256sum
    bat batcat pr fold paste join split csplit look rev tee""".split())
_NOT_READING = {"ssh-keygen", "ssh-add", "ssh", "chmod", "chown", "ls", "stat", "test", "file"}


def secret_label(path: str) -> str | None:
    """What secret `path` holds, or None."""
    n = norm_path(path.lstrip("@<"))  # curl -d @file, -F f=@file
    n = re.sub(r"^(?:/root|/home/[^/]+|\$HOME|\$\{HOME\})(?=/|$)", "~", n)
    if n.startswith(".ssh/"):
        n = "~/" + n
    return next((label for pattern, label in _SECRET_RE if pattern.fullmatch(n)), None)


def r_secret_reads(c: Call) -> Iterator[Finding]:
    """Reading a secret file: its content goes to the model (and from there anywhere). A file of the
    workspace that holds secrets (`.env`, `server.key`, `credentials.json`) counts when it is printed."""
    if c.name in _NOT_READING or c.name not in _READERS:
        return
    pattern = _search_pattern(c) if c.name in _SEARCHERS else None
    for arg in c.args:
        for part in re.split(r"[=,]", arg) if arg.startswith("-") or "=@" in arg else [arg]:
            label = secret_label(part) or (c.name in _PRINTERS and arg is not pattern and _secrets_file(part)
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
_ENV_FILE = re.compile(r"(^|/)(\.env(\.[\w.-]+)?|[^/]*\.(key|p12|pfx|kdbx|jks|keystore)|[^/]*(key|priv|[*?])[^/]*\.pem"
                       r"|(credentials|service[-_]?account)[^/]*\.json|[^/]*secrets?\.[\w-]+|id_[a-z0-9]+"
                       r"|\.(pgpass|netrc|git-credentials|htpasswd))$", re.I)
_TEMPLATE = re.compile(r"[._-](example|sample|template|dist|defaults?|tmpl|tpl|md|rst)$|\.pub$", re.I)


def _secrets_file(path: str) -> bool:
    n = norm_path(path.lstrip("@<"))
    return bool(_ENV_FILE.search(n)) and not _TEMPLATE.search(n)


def sensitive_file(path: str) -> str | None:
    """A secret file, or a file that usually holds secrets (.env, key.pem, *.key, credentials.json); not a
    template of one (.env.example)."""
    return secret_label(path) or ("secrets file" if _secrets_file(path) else None)


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

_DB_TASKS = re.compile(r"db:(drop|reset|purge|truncate_all|schema:load|structure:load|migrate:reset|seed:replant)"
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


# ---------------------------------------------------------------- containers

_ESCAPE_FLAGS = re.compile(r"--privileged(=true)?$|--(pid|ipc|uts|userns|cgroupns)(=|$)host|--net(work)?=host$"
                           r"|--cap-add(=|$)(all|sys_admin|sys_ptrace|sys_module|dac_read_search|sys_rawio)"
                           r"|--security-opt(=|$)(apparmor[=:]unconfined|seccomp[=:]unconfined|label[=:]disable)"
                           r"|--device(=|$)/dev/(sd|nvme|mem|kmem|kmsg)", re.I)
_HOST_MOUNTS = re.compile(r"^(/|/etc|/root|/home|/proc|/sys|/dev|/boot|/var/run/docker\.sock|/run/docker\.sock"
                          r"|/var/run|/run|/var/lib/docker|~)(/)?:|(source|src)=(/|/etc|/root|/var/run/docker\.sock"
                          r"|/run/docker\.sock)(,|$)")


def r_container_escape(c: Call) -> Iterator[Finding]:
    if c.name == "nsenter":
        yield Hit(DANGEROUS, "entering another process's namespaces (nsenter)", c.shown)
        return
    if c.name == "chroot":
        yield Hit(DANGEROUS, "chroot", c.shown)
        return
    if c.name not in ("docker", "podman", "nerdctl"):
        return
    if not any(w in ("run", "create", "exec") for w in c.args[:4]):
        return
    joined = []
    for k, a in enumerate(c.args):  # --flag value → --flag=value
        if a.startswith("--") and "=" not in a and k + 1 < len(c.args) and not c.args[k + 1].startswith("-") and \
                a in ("--pid", "--ipc", "--uts", "--userns", "--net", "--network", "--cap-add", "--security-opt",
                      "--device", "--cgroupns"):
            joined.append(f"{a}={c.args[k + 1]}")
        else:
            joined.append(a)
    bad = [a for a in joined if _ESCAPE_FLAGS.match(a)]
    mounts = [c.args[k + 1] for k, a in enumerate(c.args[:-1]) if a in ("-v", "--volume", "--mount")]
    mounts += [a.partition("=")[2] for a in c.args if a.startswith(("--volume=", "--mount=", "-v="))]
    if any(_HOST_MOUNTS.search(m) for m in mounts):
        bad.append("a host system path mounted")
    if any(secret_label(m.split(":")[0].partition("=")[2] if "=" in m.split(":")[0] else m.split(":")[0])
           for m in mounts):
        bad.append("a secret mounted into it")
    if bad:
        yield Hit(DANGEROUS, f"container with host access ({bad[0]})", c.shown)


# ---------------------------------------------------------------- filling disks and memory

_SIZE = re.compile(r"^(\d+(?:\.\d+)?)([kmgtpe]?)(?:i?b)?$", re.I)


def size_bytes(text: str) -> float | None:
    """'100G' → bytes (powers of 1024), None when it is not a size."""
    m = _SIZE.match(text.strip())
    if not m:
        return None
    return float(m.group(1)) * 1024 ** ("kmgtpe".index(m.group(2).lower()) + 1 if m.group(2) else 0)


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


# fleets: agent.command_runners


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

_POWER_METHOD = re.compile(r"\b(PowerOff|Reboot|Halt|KExec|Suspend|Hibernate|HybridSleep|SuspendThenHibernate"
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

_GIT_CODE_KEYS = re.compile(r"(core\.(hookspath|sshcommand|pager|editor|fsmonitor|askpass|gitproxy)"
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


RULES: dict[str, tuple[Callable[[Call], Iterator[Finding]], ...]] = {}
for _names, _rule in (
        (_READERS, r_secret_reads),
        (_STOPPING, r_service_managers), (("nginx", "openresty", "httpd", "apache2"), r_server_signals),
        (("dropdb", "dropuser", "dropcluster", "pg_dropcluster", "mysqladmin", "mongorestore", "influx", "arangosh",
          "cockroach", "pg_restore", "flyway", "liquibase", "diesel", "sqlx", "migrate", "dotnet", "goose", "dbmate",
          "atlas"), r_db_cli),
        (("rails", "rake", "php", "python", "python3", "bundle", "npx", "django-admin", "sequelize", "sequelize-cli",
          "typeorm", "knex", "prisma", "alembic", "flask", "mix", "artisan", "yarn", "pnpm"), r_framework),
        (("docker", "podman", "nerdctl", "nsenter", "chroot"), r_container_escape),
        (("fallocate", "stress", "stress-ng", "memtester", "dd", "head"), r_fill),
        (("flashrom", "fwupdmgr", "fwupdtool", "nvme", "hdparm", "sg_format", "sg_sanitize", "sg_write_buffer",
          "efibootmgr", "mokutil"), r_firmware),
        (("dbus-send", "busctl", "gdbus", "qdbus", "qdbus6", "dbus", "ipmitool", "rtcwake"), r_power_bus),
        (("setsid", "nohup", "disown", "daemonize", "start-stop-daemon", "systemd-run", "at", "batch", "screen",
          "tmux"), r_detach),
        (("git",), r_git_config), (("redis-cli", "valkey-cli", "keydb-cli"), r_redis),
        (("npm", "pnpm", "yarn", "pip", "pip3"), r_credentials_config),
        (("chatgate",), r_chatgate_cli)):
    for _name in _names:
        RULES[_name] = RULES.get(_name, ()) + (_rule,)

from agent import (  # noqa: E402 (they use names above)
    command_data, command_escapes, command_exfil, command_host, command_rules_exec, command_rules_remote,
    command_rules_system, command_runners)

for _table in (command_rules_exec.RULES, command_rules_system.RULES, command_rules_remote.RULES, command_exfil.RULES,
               command_host.RULES, command_runners.RULES, command_escapes.RULES, command_data.RULES):
    for _name, _rules in _table.items():
        RULES[_name] = RULES.get(_name, ()) + _rules
