"""`chatgate run`, `doctor`, `status` and `logs`: the daemon, the check before it, whether it is up,
and what it wrote."""

from __future__ import annotations

import argparse
from typing import Any

from gateway.cli.dispatch import handled_by

PRIORITIES = ("emerg", "alert", "crit", "err", "warning", "notice", "info", "debug")  # syslog's, 0 to 7


def add_parsers(sub: Any) -> None:
    handled_by(sub.add_parser("run", help="run the gateway in the foreground"), "gateway.cli.daemon:run")
    handled_by(sub.add_parser("doctor", help="check the configuration, the LLM endpoint and the tokens"),
               "gateway.cli.daemon:doctor")
    status = sub.add_parser("status", help="is the daemon running, is it ready, what waits, what failed")
    status.add_argument("--json", action="store_true", help="print it as JSON")
    handled_by(status, "gateway.cli.status:status")
    logs = sub.add_parser("logs", help="the daemon's log: the journal under systemd, else its log file",
                          description="The daemon's log: `journalctl -u chatgate` when a chatgate unit is "
                          "installed, else $CHATGATE_HOME/logs/chatgate.log; inside a container, where to read it.")
    logs.add_argument("-f", "--follow", action="store_true", help="keep showing new lines (Ctrl-C stops)")
    logs.add_argument("-n", "--lines", type=_count, default=50, metavar="N", help="the last N lines (default 50)")
    logs.add_argument("-p", "--priority", type=_priority, metavar="PRIORITY",
                      help="this priority and more severe: emerg alert crit err warning notice info debug, or 0-7")
    logs.add_argument("--user", action="store_true", help="the user unit's journal (`service install --user`)")
    handled_by(logs, "gateway.cli.logs:logs", config=False)


def _count(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of lines")
    return int(text)


def _priority(text: str) -> int:
    """A syslog priority given as a name (`warning`) or a number (`4`)."""
    if text.isdigit() and int(text) < len(PRIORITIES):
        return int(text)
    if text.lower() in PRIORITIES:
        return PRIORITIES.index(text.lower())
    raise argparse.ArgumentTypeError(f"{text!r} is not a priority: one of {', '.join(PRIORITIES)} or 0-7")
