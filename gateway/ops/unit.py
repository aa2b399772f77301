"""The systemd unit for this installation: its interpreter, its `CHATGATE_HOME`, its user.

Hardened for what chatgate does: it writes only under its home (and the agent's workspace), reads
the rest of the system, talks to the network, and starts the tool sandbox — bubblewrap needs user
namespaces, so `RestrictNamespaces=`, `PrivateUsers=` and a system-call filter are left out.
"""

from __future__ import annotations

import getpass
import grp
import os
import pwd
import sys
from pathlib import Path

from gateway.ops.process import EXIT_HOME_IN_USE, EXIT_REFUSED

UNIT_NAME = "chatgate.service"
INSTALLED = "# Written by `chatgate service install`; `chatgate service uninstall` removes it."
SHIPPED = """\
# deploy/chatgate.service: what `chatgate service install` writes, for chatgate installed in
# /opt/chatgate/.venv, run as the user chatgate, its state in /var/lib/chatgate. Generated from
# gateway/ops/unit.py (`make deploy-files`); change the code, not this file.
# `sudo chatgate service install` writes it for your own paths; by hand, see the README (Deploy)."""


def unit_dir(user: bool) -> Path:
    if user:
        return Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config") / "systemd" / "user"
    return Path("/etc/systemd/system")


def _quote(path: Path | str) -> str:
    text = str(path)
    return f'"{text}"' if any(c.isspace() for c in text) else text


def _under_tmp(paths: list[Path]) -> bool:
    """A private /tmp would hide these (state kept under /tmp: a trial install)."""
    return any(p.resolve().is_relative_to(t) for p in paths for t in (Path("/tmp"), Path("/var/tmp")))


def service_account() -> tuple[str, Path | None]:
    """Who the system unit runs as: the person behind `sudo` (and their default home), else the
    current user (None: the configured home stands)."""
    invoker = os.environ.get("SUDO_USER")
    if os.geteuid() == 0 and invoker and invoker != "root":
        try:
            return invoker, Path(pwd.getpwnam(invoker).pw_dir) / ".chatgate"
        except KeyError:
            pass
    return getpass.getuser(), None


def render_unit(*, home: Path, writable: list[Path], user: bool, drain_seconds: float,
                config_file: Path | None = None, account: str | None = None, group: str | None = None,
                python: Path | None = None, header: str = INSTALLED) -> str:
    """The unit text. `writable`: the folders beside `home` the service writes (the workspace);
    `account`, `group`, `python`: whom it runs as and with what (default: this user, their primary
    group, this interpreter)."""
    command = [str(python or sys.executable), "-m", "gateway", *(["--config", str(config_file)] if config_file else []),
               "run"]
    paths = " ".join(_quote(p) for p in dict.fromkeys([home, *writable]))
    lines = [
        header,
        "[Unit]",
        "Description=chatgate - one AI agent in your chats",
        "After=network-online.target",
        "Wants=network-online.target",
        "",
        "[Service]",
        "Type=notify",
        "NotifyAccess=main",
    ]
    if not user:
        name = account or getpass.getuser()
        lines += [f"User={name}", f"Group={group or grp.getgrgid(pwd.getpwnam(name).pw_gid).gr_name}"]
        if home.parent == Path("/var/lib"):  # systemd makes it, owned by User=
            lines += [f"StateDirectory={home.name}", "StateDirectoryMode=0700"]
    lines += [
        f'Environment="CHATGATE_HOME={home}"',
        f"EnvironmentFile=-{_quote(home / 'env')}",  # optional: KEY=value lines (tokens, keys), mode 0600
        f"WorkingDirectory={_quote(home)}",
        f"ExecStart={' '.join(_quote(part) for part in command)}",
        "SyslogIdentifier=chatgate",
        "# SIGTERM drains: running turns finish (gateway.drain_seconds), the outbox is flushed.",
        "KillSignal=SIGTERM",
        "KillMode=mixed",
        f"TimeoutStopSec={int(drain_seconds) + 30}",
        "TimeoutStartSec=120",
        "# A loop that stops answering stops feeding the watchdog: systemd restarts the service.",
        "WatchdogSec=30",
        "Restart=on-failure",
        "RestartSec=2",
        "# Another chatgate holds this home (e.g. one started by hand): stay stopped, say so, no loop.",
        f"RestartPreventExitStatus={EXIT_HOME_IN_USE}",
        "# Every platform refused for good (a revoked token): restarting cannot help until the config changes.",
        f"RestartPreventExitStatus={EXIT_REFUSED}",
        "UMask=0077",
        "NoNewPrivileges=yes",
        "ProtectSystem=strict",
        "ProtectHome=read-only",
        f"ReadWritePaths={paths}",
        *([] if _under_tmp([home, *writable]) else ["PrivateTmp=yes"]),
        "LockPersonality=yes",
        "RestrictRealtime=yes",
        "RestrictSUIDSGID=yes",
        "SystemCallArchitectures=native",
    ]
    if not user:  # (a user manager cannot apply these)
        lines += [
            "PrivateDevices=yes",
            "ProtectKernelTunables=yes",
            "ProtectKernelModules=yes",
            "ProtectKernelLogs=yes",
            "ProtectControlGroups=yes",
            "ProtectClock=yes",
            "ProtectHostname=yes",
            "RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6 AF_NETLINK",
            "CapabilityBoundingSet=",
        ]
    lines += ["", "[Install]", f"WantedBy={'default.target' if user else 'multi-user.target'}", ""]
    return "\n".join(lines)


def shipped_unit() -> str:
    """`deploy/chatgate.service`: the unit for the paths the README's manual install uses."""
    from gateway.config import GatewayConfig

    return render_unit(home=Path("/var/lib/chatgate"), writable=[], user=False, account="chatgate",
                       group="chatgate", python=Path("/opt/chatgate/.venv/bin/python"), header=SHIPPED,
                       drain_seconds=GatewayConfig.model_fields["drain_seconds"].default)
