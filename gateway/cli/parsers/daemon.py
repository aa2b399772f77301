"""`chatgate run`, `doctor` and `status`: the daemon, the check before it, and whether it is up."""

from __future__ import annotations

from typing import Any

from gateway.cli.dispatch import handled_by


def add_parsers(sub: Any) -> None:
    handled_by(sub.add_parser("run", help="run the gateway in the foreground"), "gateway.cli.daemon:run")
    handled_by(sub.add_parser("doctor", help="check the configuration, the LLM endpoint and the tokens"),
               "gateway.cli.daemon:doctor")
    status = sub.add_parser("status", help="is the daemon running, is it ready, what waits, what failed")
    status.add_argument("--json", action="store_true", help="print it as JSON")
    handled_by(status, "gateway.cli.status:status")
