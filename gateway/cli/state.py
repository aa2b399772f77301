"""Commands over the daemon's database: pairing, sessions, approvals (with or without the daemon)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Any, AsyncIterator, Awaitable, Callable

from gateway.board.words import one_line
from gateway.config import Config

Handler = Callable[[Config, argparse.Namespace], Awaitable[int]]


@asynccontextmanager
async def open_store(config: Config) -> AsyncIterator[Any]:
    """The daemon's database, opened beside a running daemon or without one (WAL allows both). It
    is migrated only when no daemon holds the home: never under one that is running. A PostgreSQL
    database (`storage.url`) never: other instances may run on it; a daemon of this version upgrades it."""
    from gateway.ops.process import may_migrate
    from gateway.storage import Store

    store = await Store.open(config.db_path, url=config.database_url,
                             migrate=may_migrate(config.home, config.database_url),
                             lock_wait=config.gateway.lock_wait_seconds)
    try:
        yield store
    finally:
        await store.close()


def with_store(handler: Callable[[Config, Any, argparse.Namespace], Awaitable[int]]) -> Handler:
    """A command handler given the open database."""
    async def run(config: Config, args: argparse.Namespace) -> int:
        async with open_store(config) as store:
            return await handler(config, store, args)

    return run


@with_store
async def rules(config: Config, store: Any, args: argparse.Namespace) -> int:

    if args.rules_action == "remove":
        if args.rule_id is None:
            print("usage: chatgate approvals rules remove RULE_ID", file=sys.stderr)
            return 2
        if not await store.approvals.remove_rule(args.rule_id):
            print(f"no rule {args.rule_id}", file=sys.stderr)
            return 1
        print(f"removed rule {args.rule_id}")
        return 0
    for rule in await store.approvals.rules():
        when = datetime.fromtimestamp(rule["created_at"]).strftime("%Y-%m-%d %H:%M")
        scope = {"user": f"user {rule['platform']}:{rule['user_id']}", "chat": f"chat {rule['platform']}:"
                 f"{rule['chat_id']}"}.get(rule["scope"], "everyone")
        where = {"sandbox": "in the sandbox", "unconfined": "UNCONFINED"}.get(rule["confinement"], "")
        print(f"{rule['id']:>4}  {rule['kind']:<10} {where:<14} {when}  for {scope}, by "
              f"{one_line(rule['created_by'], 40)}: {one_line(rule['subject'], 200)}")
    return 0


@with_store
async def pair(config: Config, store: Any, args: argparse.Namespace) -> int:
    from gateway.access.pairing import Pairing

    if args.action == "approve":
        admitted = await Pairing(store.access).approve(args.platform, args.code)
        if admitted is None:
            print(f"no pending {args.platform} code {one_line(args.code.upper(), 20)} (wrong, expired after an hour, "
                  "or replaced: the person gets a new one by writing again)", file=sys.stderr)
            return 1
        print(f"approved {one_line(admitted.user_name or admitted.user_id, 60)} ({args.platform} user "
              f"{admitted.user_id})")
    elif args.action == "revoke":
        if not await store.access.unpair(args.platform, args.user_id):
            print(f"{args.platform} user {args.user_id} was not approved", file=sys.stderr)
            return 1
        print(f"revoked {args.platform} user {args.user_id}")
    else:
        for code in await store.access.pending_codes():
            left = (code.expires_at - datetime.now().timestamp()) / 60
            print(f"pending   {code.platform:<9} {code.code}  {one_line(code.user_name, 40)} ({code.user_id}), "
                  f"{left:.0f} min left")
        for platform, user_id, name, when in await store.access.paired():
            print(f"approved  {platform:<9} {user_id}  {one_line(name, 40)}  since "
                  f"{datetime.fromtimestamp(when):%Y-%m-%d %H:%M}")
    return 0


@with_store
async def sessions(config: Config, store: Any, args: argparse.Namespace) -> int:
    if args.action == "list":
        for s in await store.sessions.listing(args.limit):
            ended = " (ended)" if s["ended_at"] else ""
            when = datetime.fromtimestamp(s["updated_at"]).strftime("%Y-%m-%d %H:%M")
            print(f"{s['id']:>6}  {when}  {s['messages']:>5} msgs  {s['key']}{ended}")
    else:
        for hit in await store.sessions.search(args.query, platform=args.platform, user_id=args.user):
            print(f"session {hit.session_id} {hit.role}: {hit.snippet}")
    return 0


@with_store
async def usage(config: Config, store: Any, args: argparse.Namespace) -> int:
    from gateway.usage import describe

    since = time.time() - args.days * 86400
    loops = await store.usage.by_loop(since=since)
    days = await store.usage.by_day(since)
    top = await store.usage.top_sessions(since)
    if args.json:
        print(json.dumps({"days": args.days, "loops": loops, "by_day": days, "top_sessions": top}, indent=2))
        return 0
    print(f"LLM usage, last {args.days:g} days: {describe(loops)}")
    for loop, totals in loops.items():
        print(f"  {loop:<8} {describe({loop: totals})}")
    for r in days:
        print(f"  {r['day']}  {r['prompt'] + r['completion']:>12,} tokens in {r['requests']:,} request(s)")
    for r in top:
        print(f"  session {r['session_id']} ({r['key'] or '?'}): {r['tokens']:,} tokens in "
              f"{r['requests']:,} request(s)")
    return 0


@with_store
async def inbox(config: Config, store: Any, args: argparse.Namespace) -> int:
    if args.action == "dead":
        rows = await store.inbox.dead_letters(args.limit)
        for r in rows:
            print(f"{_when(r['created_at'])}  {r['platform']} {r['ref'] or '(no id)'}: {r['reason']}\n"
                  f"    {r['payload'][:300]}")
        print(f"{len(rows)} dead letter(s) shown" if rows else "no dead letters")
        return 0
    failed = await store.inbox.failures(args.limit)
    for r in failed:
        print(f"{_when(r['at'])}  {r['kind']:<8} {r['platform']}:{r['chat_id']}  {r['error'] or ''}")
    print(f"{len(failed)} failure(s) shown" if failed else "no failed turns or deliveries")
    return 0


def _when(at: float) -> str:
    return datetime.fromtimestamp(at).strftime("%Y-%m-%d %H:%M:%S")


@with_store
async def backup(config: Config, store: Any, args: argparse.Namespace) -> int:
    """The database (SQLite's online backup: consistent while the daemon writes), the config, the
    agent's memory and skills, in one archive readable by its owner only (`chatgate restore` reads it)."""
    import asyncio
    import os
    import tarfile
    import tempfile
    from pathlib import Path

    from gateway.ops.archive import DATABASE, FILES, FOLDERS, files_and_folders

    target = Path(args.file).expanduser().resolve()
    with tempfile.TemporaryDirectory(dir=target.parent) as scratch:
        snapshot = Path(scratch) / DATABASE
        await store.backup(snapshot)

        def archive() -> None:
            partial = Path(scratch) / "partial.tar.gz"
            fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as raw, tarfile.open(fileobj=raw, mode="w:gz") as tar:
                tar.add(snapshot, arcname=DATABASE)
                for name in (*FILES[1:], *FOLDERS):
                    if (config.home / name).exists():  # (a config.yaml that is a link: the file it names)
                        tar.add((config.home / name).resolve(), arcname=name, filter=files_and_folders)
            os.replace(partial, target)

        await asyncio.to_thread(archive)
    print(f"backed up {config.home} to {target}")
    return 0
