"""`chatgate service install|uninstall [--user] [--print]`: chatgate as a systemd service."""

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
    for parser in (install, uninstall):
        parser.add_argument("--user", action="store_true", help="a user service (systemctl --user), no root needed")
        parser.add_argument("--unit-dir", help=argparse.SUPPRESS)  # tests: where units go
