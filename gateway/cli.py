"""The `chatgate` command line."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import signal
import sys
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Any, AsyncIterator, Sequence

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
    approvals = sub.add_parser("approvals", help="the command safety check and 'always allow' rules")
    approvals_sub = approvals.add_subparsers(dest="action", required=True)
    check = approvals_sub.add_parser("check", help="classify a shell command: hardline, dangerous or safe (JSON)")
    check.add_argument("shell_command")
    rules = approvals_sub.add_parser("rules", help="list or remove 'always allow' rules")
    rules.add_argument("rules_action", choices=["list", "remove"])
    rules.add_argument("rule_id", nargs="?", type=int)
    pair = sub.add_parser("pair", help="admit people who asked for access in a DM")
    pair_sub = pair.add_subparsers(dest="action", required=True)
    pair_sub.add_parser("list", help="pending codes and approved people")
    approve = pair_sub.add_parser("approve", help="admit the person who was given CODE")
    approve.add_argument("platform")
    approve.add_argument("code")
    revoke = pair_sub.add_parser("revoke", help="remove an approved person")
    revoke.add_argument("platform")
    revoke.add_argument("user_id")
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
    except (OSError, RuntimeError) as exc:
        print(f"chatgate cannot start: {exc}", file=sys.stderr)
        await runner.stop()
        return 1
    print(f"chatgate is running: open http://{config.http.host}:{runner.http.port}/ (Ctrl-C stops)", flush=True)
    waiters = [asyncio.ensure_future(stop.wait()), asyncio.ensure_future(runner.failed.wait())]
    await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
    for waiter in waiters:
        waiter.cancel()
    log.info("stopping: finishing running turns (up to %.0fs)", config.gateway.drain_seconds)
    await runner.stop()
    if runner.failure:
        print(f"chatgate stopped: {runner.failure}", file=sys.stderr)
        return 1
    return 0


async def _doctor(config: Config) -> int:
    from gateway.doctor import run_doctor

    lines: list[str] = []
    ok = await run_doctor(config, lines)
    print("\n".join(lines))
    print("all good" if ok else "problems found")
    return 0 if ok else 1


def _check_command(command: str) -> int:
    from agent.command_guard import classify

    print(json.dumps(classify(command).as_dict()))
    return 0


@asynccontextmanager
async def _open_store(config: Config) -> AsyncIterator[Any]:
    """The daemon's database, opened beside a running daemon or without one (WAL allows both)."""
    from gateway.store import Store

    store = await Store.open(config.db_path)
    try:
        yield store
    finally:
        await store.close()


async def _rules(config: Config, args: argparse.Namespace) -> int:
    async with _open_store(config) as store:
        if args.rules_action == "remove":
            if args.rule_id is None:
                print("usage: chatgate approvals rules remove RULE_ID", file=sys.stderr)
                return 2
            async with store.tx() as db:
                cur = await db.execute("DELETE FROM approval_rules WHERE id = ?", (args.rule_id,))
            if not cur.rowcount:
                print(f"no rule {args.rule_id}", file=sys.stderr)
                return 1
            print(f"removed rule {args.rule_id}")
            return 0
        for rule in await store.fetch_all("SELECT * FROM approval_rules ORDER BY id"):
            when = datetime.fromtimestamp(rule["created_at"]).strftime("%Y-%m-%d %H:%M")
            print(f"{rule['id']:>4}  {rule['kind']:<8} {when}  by {rule['created_by']}: {rule['subject']}")
    return 0


async def _pair(config: Config, args: argparse.Namespace) -> int:
    from gateway.pairing import Pairing

    async with _open_store(config) as store:
        pairing = Pairing(store)
        if args.action == "approve":
            admitted = await pairing.approve(args.platform, args.code)
            if admitted is None:
                print(f"no pending {args.platform} code {args.code.upper()} (wrong, or expired after an hour)",
                      file=sys.stderr)
                return 1
            print(f"approved {admitted.user_name or admitted.user_id} ({args.platform} user {admitted.user_id})")
        elif args.action == "revoke":
            if not await pairing.revoke(args.platform, args.user_id):
                print(f"{args.platform} user {args.user_id} was not approved", file=sys.stderr)
                return 1
            print(f"revoked {args.platform} user {args.user_id}")
        else:
            for code in await pairing.pending():
                left = (code.expires_at - datetime.now().timestamp()) / 60
                print(f"pending   {code.platform:<9} {code.code}  {code.user_name} ({code.user_id}), {left:.0f} min left")
            for platform, user_id, name, when in await pairing.approved():
                print(f"approved  {platform:<9} {user_id}  {name}  since {datetime.fromtimestamp(when):%Y-%m-%d %H:%M}")
    return 0


async def _sessions(config: Config, args: argparse.Namespace) -> int:
    async with _open_store(config) as store:
        if args.action == "list":
            for s in await store.list_sessions(args.limit):
                ended = " (ended)" if s["ended_at"] else ""
                when = datetime.fromtimestamp(s["updated_at"]).strftime("%Y-%m-%d %H:%M")
                print(f"{s['id']:>6}  {when}  {s['messages']:>5} msgs  {s['key']}{ended}")
        else:
            for hit in await store.search(args.query, platform=args.platform, user_id=args.user):
                print(f"session {hit.session_id} {hit.role}: {hit.snippet}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "approvals" and args.action == "check":
        return _check_command(args.shell_command)  # needs no configuration
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
        if args.command == "pair":
            return asyncio.run(_pair(config, args))
        if args.command == "approvals":
            return asyncio.run(_rules(config, args))
        return asyncio.run(_sessions(config, args))
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
