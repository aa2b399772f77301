"""The `chatgate` command line: one parser built from light modules (gateway/cli/parsers/), and a
module per group of commands that holds what they do, imported only when one of them is chosen."""

from __future__ import annotations

from typing import Sequence

from gateway.cli.dispatch import load
from gateway.cli.parsers import build
from gateway.ops.collector import collector_on


def main(argv: Sequence[str] | None = None) -> int:
    parser = build()
    args = parser.parse_args(argv)
    if args.command is None:  # a bare `chatgate`: what it can do
        parser.print_help()
        return 0
    handler = load(args.handler)
    if not args.needs_config:
        collector_on(started=False)
        return int(handler(args))
    from gateway.cli.configured import run_configured

    return run_configured(handler, args)
