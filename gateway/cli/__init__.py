"""The `chatgate` command line: one parser, one module per group of commands."""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Callable, Sequence

from gateway.cli import cron, daemon, learning, service, state
from gateway.config import ConfigError, load_config
from gateway.storage.database import SchemaError, StorageError
from gateway.ops.collector import collector_on
from gateway.ops.logs import setup_logging

GROUPS = (daemon, state, cron, learning, service)  # each: add_parsers(sub) and HANDLERS {command: async handler}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="chatgate", description="One AI agent in your chats.")
    parser.add_argument("--config", help="config file (default: $CHATGATE_HOME/config.yaml)")
    sub = parser.add_subparsers(dest="command", required=True)
    for group in GROUPS:
        group.add_parsers(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "approvals" and args.action == "check":
        return state.check_command(args.shell_command)  # needs no configuration
    try:
        config = load_config(args.config)
    except ConfigError as exc:
        print(exc, file=sys.stderr)
        return 2
    setup_logging(config.gateway.log_level, config.secrets(), config.gateway.log_format)
    handler = next(group.HANDLERS[args.command] for group in GROUPS if args.command in group.HANDLERS)
    if handler is not daemon.run:
        collector_on(started=False)  # (`run` turns it on once it is up)
    try:
        with asyncio.Runner(loop_factory=event_loop(config.gateway.event_loop)) as runner:
            return runner.run(handler(config, args))
    except KeyboardInterrupt:
        return 130
    except (SchemaError, StorageError) as exc:  # a database from a newer chatgate, one locked too long: one line
        print(f"chatgate {args.command}: {exc}", file=sys.stderr)
        return 1


def event_loop(choice: str) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's loop when asked for or, with `auto`, when installed (`chatgate[fast]`); else asyncio's.
    Measured on the shared benchmark: see the commit that added it."""
    if choice == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:
        if choice == "uvloop":
            print("gateway.event_loop: uvloop is not installed (pip install 'chatgate[fast]'); using asyncio's",
                  file=sys.stderr)
        return None
    return uvloop.new_event_loop
