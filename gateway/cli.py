"""The `chatgate` command line."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from datetime import datetime
from typing import Sequence

from gateway.config import Config, ConfigError, load_config
from gateway.logs import setup_logging

log = logging.getLogger("chatgate")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="chatgate", description="One AI agent in your chats.")
    parser.add_argument("--config", help="config file (default: $CHATGATE_HOME/config.yaml)")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("run", help="run the gateway in the foreground")
    sub.add_parser("doctor", help="check the configuration, the LLM endpoint and the tokens")
    sessions = sub.add_parser("sessions", help="list or search conversations")
    sessions_sub = sessions.add_subparsers(dest="action", required=True)
    listing = sessions_sub.add_parser("list", help="recent sessions")
    listing.add_argument("--limit", type=int, default=20)
    search = sessions_sub.add_parser("search", help="full-text search in transcripts")
    search.add_argument("query")
    search.add_argument("--platform", required=True)
    search.add_argument("--user", required=True)
    return parser


async def _run(config: Config) -> int:
    from gateway.runner import GatewayRunner

    runner = GatewayRunner(config)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        await runner.start()
    except OSError as exc:
        log.error("cannot start: %s", exc)
        await runner.stop()
        return 1
    print(f"chatgate is running: open http://{config.http.host}:{runner.http.port}/ (Ctrl-C stops)", flush=True)
    await stop.wait()
    log.info("stopping: finishing running turns (up to %.0fs)", config.gateway.drain_seconds)
    await runner.stop()
    return 0


async def _doctor(config: Config) -> int:
    from gateway.doctor import run_doctor

    lines: list[str] = []
    ok = await run_doctor(config, lines)
    print("\n".join(lines))
    print("all good" if ok else "problems found")
    return 0 if ok else 1


async def _sessions(config: Config, args: argparse.Namespace) -> int:
    from gateway.store import Store

    store = await Store.open(config.db_path)
    try:
        if args.action == "list":
            for s in await store.list_sessions(args.limit):
                ended = " (ended)" if s["ended_at"] else ""
                when = datetime.fromtimestamp(s["updated_at"]).strftime("%Y-%m-%d %H:%M")
                print(f"{s['id']:>6}  {when}  {s['messages']:>5} msgs  {s['key']}{ended}")
        else:
            for hit in await store.search(args.query, platform=args.platform, user_id=args.user):
                print(f"session {hit.session_id} {hit.role}: {hit.snippet}")
    finally:
        await store.close()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        config = load_config(args.config)
    except ConfigError as exc:
        print(exc, file=sys.stderr)
        return 2
    setup_logging(config.gateway.log_level, config.secrets())
    try:
        if args.command == "run":
            return asyncio.run(_run(config))
        if args.command == "doctor":
            return asyncio.run(_doctor(config))
        return asyncio.run(_sessions(config, args))
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
