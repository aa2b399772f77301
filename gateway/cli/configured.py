"""Running a command that reads the configuration: the config, logging, then its async handler in
an event loop. `chatgate --help`, `--version`, `approvals check` and `completion` never come here."""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any, Awaitable, Callable

from gateway.config import Config, ConfigError, load_config
from gateway.ops.collector import collector_on
from gateway.ops.logs import setup_logging


def run_configured(handler: Callable[[Config, argparse.Namespace], Awaitable[int]], args: argparse.Namespace) -> int:
    try:
        config = load_config(args.config)
    except ConfigError as exc:
        print(exc, file=sys.stderr)
        return 2
    setup_logging(config.gateway.log_level, config.secrets(), config.gateway.log_format)
    daemon = args.command == "run"
    if not daemon:
        collector_on(started=False)  # (`run` turns it on once it is up)
    loop_factory = event_loop(config.gateway.event_loop) if daemon else None  # (a command's few awaits: asyncio's)
    try:
        with asyncio.Runner(loop_factory=loop_factory) as runner:
            return runner.run(handler(config, args))
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # a database from a newer chatgate, one locked too long: one line
        if not _storage_error(exc):
            raise
        print(f"chatgate {args.command}: {exc}", file=sys.stderr)
        return 1


def _storage_error(exc: BaseException) -> bool:
    """A SchemaError or StorageError; the storage is not imported for this (a command that never
    opened the database cannot have raised either)."""
    database: Any = sys.modules.get("gateway.storage.database")
    return database is not None and isinstance(exc, (database.SchemaError, database.StorageError))


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
