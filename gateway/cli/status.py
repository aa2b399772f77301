"""`chatgate status`: is the daemon running, is it ready, what waits, what failed. It reads the
configuration and the database; it asks the daemon's /readyz (over aiohttp) only when one runs."""

from __future__ import annotations

import argparse
import json
import socket
import sys
from typing import Any, Callable

from gateway.config import Config
from gateway.ops.process import daemon_pid, lock_file_problem


def local_url(config: Config, port: int) -> str:
    """The gateway's HTTP server as reached from this machine (loopback when it listens everywhere)."""
    host = config.http.host if config.http.host not in ("0.0.0.0", "::", "") else "127.0.0.1"
    return f"http://{host if ':' not in host else f'[{host}]'}:{port}"


def _chat_link(config: Config) -> str | None:
    """The web chat's link with its token, when the web chat is on."""
    from platforms import registry
    from platforms.webchat.access import entry_url, known_token

    sections = config.platforms.sections()
    if "webchat" not in registry.wanted(sections):
        return None
    token = sections["webchat"].token  # type: ignore[attr-defined]
    base = config.http.public_url or local_url(config, config.http.port)
    return entry_url(base.rstrip("/"), known_token(token.get_secret_value() if token is not None else None,
                                                   config.home))


async def status(config: Config, args: argparse.Namespace) -> int:
    """0: running and ready; 1: running, not ready; 3: not running (as `systemctl status`)."""
    from gateway.cli.state import open_store
    from gateway.cron.ledger import RunLedger
    from gateway.storage.database import SchemaError, StorageError

    pid = daemon_pid(config.home)  # the daemon holding the home (its pid file says which)
    if problem := lock_file_problem(config.home):
        print(problem, file=sys.stderr)
    report: dict[str, Any] = {"home": str(config.home), "running": pid is not None, "pid": pid, "ready": None,
                              "platforms": {}, "storage": None, "instances": []}
    if config.database_url or config.db_path.exists():
        try:
            async with open_store(config) as store:
                instances = await RunLedger(store.cron, "status").live_instances(
                    stale_after=3 * config.gateway.tick_seconds)
                leases, owned = await store.leases.held(), await store.owners.counts()
                report["instances"] = [{"id": i["id"], "pid": i["pid"], "host": i["host"], "since": i["started_at"],
                                        "holds": [lease["platform"] for lease in leases if lease["holder"] == i["id"]],
                                        "conversations": owned.get(i["id"], 0)} for i in instances]
                if pid == 0:  # its pid file was deleted: the pid it registered in the database says which
                    report["pid"] = next((i["pid"] for i in instances if i["host"] == socket.gethostname()), 0)
                report["running"] = report["running"] or bool(instances)
                report["queue"] = await store.inbox.queue_counts()
                report["trouble"] = await store.inbox.trouble_counts()
                report["last_errors"] = await store.inbox.recent_errors()
                report["board"] = await store.board.counts()
        except (SchemaError, StorageError) as exc:
            report["database"] = str(exc)
    if report["running"]:
        report["ready"], report["platforms"], report["storage"] = await _readiness(config)
        report["web_chat"] = _chat_link(config)
    if args.json:
        print(json.dumps(report, indent=2, default=str))
    else:
        _print_status(report)
    return 3 if not report["running"] else 0 if report["ready"] else 1


async def _readiness(config: Config) -> tuple[bool | None, dict[str, Any], dict[str, Any] | None]:
    """The daemon's own /readyz: ready, its platforms, its storage (None: it does not answer)."""
    import aiohttp

    url = f"{local_url(config, config.http.port)}/readyz"
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=3)) as http, http.get(url) as response:
            body = await response.json()
            return bool(body.get("ready")), dict(body.get("platforms") or {}), body.get("storage")
    except (aiohttp.ClientError, OSError, ValueError, TimeoutError):
        return None, {}, None


def _print_instances(report: dict[str, Any], when: Callable[[float], str]) -> None:
    """The instances alive by their heartbeat (several share one PostgreSQL database), each with the platform
    connections it holds and the conversations it runs now; the one whose /readyz was read above is this home's."""
    if len(report["instances"]) < 2 and not any(i["holds"] for i in report["instances"]):
        return
    print("instances (alive by heartbeat):")
    here = socket.gethostname()
    for i in report["instances"]:
        holds = f"holds {', '.join(i['holds'])}" if i["holds"] else "holds no platform connection"
        mine = " — this home's, asked above" if i["host"] == here and i["pid"] == report["pid"] else ""
        print(f"  {i['host']} pid {i['pid']} since {when(i['since'])}: {holds}, runs {i['conversations']}"
              f" conversation(s){mine}")


def _print_status(report: dict[str, Any]) -> None:
    from datetime import datetime

    def when(ts: float) -> str:
        return datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M:%S")

    if not report["running"]:
        print(f"chatgate is not running (home {report['home']})")
    else:
        since = {i["pid"]: i["since"] for i in report["instances"]}
        pids = [report["pid"]] if report["pid"] is not None else []
        pids += [i["pid"] for i in report["instances"] if i["pid"] not in pids]
        where = ", ".join(f"pid {pid or '?'}" + (f" since {when(since[pid])}" if pid in since else "") for pid in pids)
        ready = {True: "ready", False: "NOT ready", None: "not answering on HTTP"}[report["ready"]]
        if report["ready"] and any(p.get("state") not in ("ready", "standby") for p in report["platforms"].values()):
            ready = "ready, degraded (a platform is not)"
        print(f"chatgate is running ({where}): {ready}")
        parts = {**report["platforms"], **({"storage": report["storage"]} if report["storage"] else {})}
        for name, state in parts.items():
            error = f" — {state['error']}" if state.get("error") else ""
            error += f" ({state['waiting']} turn(s) waiting for it)" if state.get("waiting") else ""
            print(f"  {name:<9} {state['state']} since {when(state['since'])}{error}")
        _print_instances(report, when)
        if report.get("web_chat"):
            print(f"web chat: {report['web_chat']}")
    if report.get("database"):
        print(f"database: {report['database']}")
    if "queue" in report:
        q, t = report["queue"], report["trouble"]
        print(f"messages: {q['waiting']} waiting, {q['running']} running; replies: {q['outbox_pending']} to send")
        _print_board(report["board"])
        print(f"trouble: {t['failed_turns']} failed turns, {t['failed_deliveries']} undeliverable replies, "
              f"{t['dead_letters']} dead letters")
        for e in report["last_errors"]:
            print(f"  {when(e['at'])} {e['what']:<5} {e['platform']}: {(e['error'] or '')[:160]}")


def _print_board(counts: dict[str, int]) -> None:
    """The task board's tasks by status, those there are (nothing for an empty board)."""
    if not any(counts.values()):
        return
    line = ", ".join(f"{n} {status}" for status, n in counts.items() if n)
    if counts.get("blocked"):
        line += " (the blocked wait for an answer: chatgate board list --status blocked)"
    print(f"task board: {line}")
