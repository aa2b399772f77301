"""`chatgate service install|uninstall|start|stop|restart|status [--user]`: chatgate as a systemd service."""

from __future__ import annotations

import argparse
from typing import Any

from gateway.cli.dispatch import handled_by


def add_parsers(sub: Any) -> None:
    service = sub.add_parser("service", help="run chatgate as a systemd service (restarted on failure)")
    handled_by(service, "gateway.cli.service:service")
    service_sub = service.add_subparsers(dest="action", required=True)
    install = service_sub.add_parser("install", help="write the unit, reload systemd, enable and start it")
    install.add_argument("--print", action="store_true", dest="print_only", help="only print the unit")
    uninstall = service_sub.add_parser("uninstall", help="stop, disable and remove the unit")
    controls = []
    for action, what in (("start", "start the installed unit (it is ready when this returns)"),
                         ("stop", "stop it: running turns finish, queued replies are sent"),
                         ("restart", "stop, then start it (after an upgrade: migrations run at start)")):
        controls.append(service_sub.add_parser(action, help=what))
        handled_by(controls[-1], "gateway.cli.systemctl:control", config=False)
    status = service_sub.add_parser("status", help="systemd's status of the unit, then `chatgate status`")
    status.set_defaults(json=False)  # (`chatgate status --json` is chatgate's part alone, for a script)
    handled_by(status, "gateway.cli.systemctl:status")
    for parser in (install, uninstall, *controls, status):
        parser.add_argument("--user", action="store_true", help="a user service (systemctl --user), no root needed")
        parser.add_argument("--unit-dir", help=argparse.SUPPRESS)  # tests: where units go
