"""Which rules judge a command: every category's table, assembled by command name, and `check`, which
runs them over one simple command.

A command has at most one first rule (`rm` → `files.r_rm`, `git` → `tools.r_git`, `mkfs.*` → `system.r_disk`),
then the rules of each category that name it, in a fixed order: harms, containers, execution, launchers,
system, remote, exfil, host, runners, escapes, data. The order only decides the order of reasons.
"""

from __future__ import annotations

from typing import Iterator

from agent.safety.classifier.paths import writes
from agent.safety.classifier.rules import (containers, data, escapes, execution, exfil, harms, host, launchers, remote,
                                           runners, system)
from agent.safety.classifier.rules.containers import r_docker, r_infra, r_kubectl
from agent.safety.classifier.rules.files import r_chmod, r_copy, r_dd, r_find, r_rm, r_sed, r_shred, r_tar, r_tee, \
    r_truncate
from agent.safety.classifier.rules.system import r_disk, r_kill, r_power, r_service, r_systemctl
from agent.safety.classifier.rules.tools import PUBLISH, download_info, r_admin, r_crontab, r_git, r_publish, \
    r_sql_client
from agent.safety.classifier.vocabulary import Call, Finding, Rule

_RULES: dict[str, Rule] = {  # the first rule for a command
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
for _n in PUBLISH:
    _RULES.setdefault(_n, r_publish)
for _n in ("fdisk sfdisk cfdisk gdisk sgdisk parted wipefs blkdiscard mkswap mke2fs mkntfs mkdosfs cryptsetup "
           "lvremove vgremove pvremove zfs zpool").split():
    _RULES[_n] = r_disk
RULE_NAMES = frozenset(_RULES)

# every other rule, by category, in the order they speak
RULES: dict[str, tuple[Rule, ...]] = {}
for _table in (harms.RULES, containers.RULES, execution.RULES, launchers.RULES, system.RULES, remote.RULES, exfil.RULES,
               host.RULES, runners.RULES, escapes.RULES, data.RULES):
    for _name, _rules in _table.items():
        RULES[_name] = RULES.get(_name, ()) + _rules


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
    for more in RULES.get(c.name, ()):
        yield from more(c)
    if c.name in ("curl", "wget", "fetch", "aria2c"):
        yield from writes(c, download_info(c.name, c.args)[1])
