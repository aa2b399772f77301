"""`chatgate run`, `doctor` and `status`: the daemon, the check before it, and whether it is up."""

from __future__ import annotations

import argparse
from typing import Any

from gateway.cli.dispatch import handled_by


def add_parsers(sub: Any) -> None:
    handled_by(sub.add_parser("run", help="run the gateway in the foreground"), "gateway.cli.daemon:run")
    doctor = sub.add_parser("doctor", help="check the configuration, the LLM endpoint and each platform's token")
    doctor.add_argument("--timeout", type=_seconds, default=10.0, metavar="SECONDS",
                        help="how long each platform may take to answer (default 10)")
    handled_by(doctor, "gateway.cli.daemon:doctor")
    status = sub.add_parser("status", help="is the daemon running, is it ready, what waits, what failed")
    status.add_argument("--json", action="store_true", help="print it as JSON")
    handled_by(status, "gateway.cli.status:status")


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not 0 < value <= 600:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds between 0 and 600")
    return value
