"""`chatgate run` and `chatgate doctor`: the daemon in the foreground, and the check before it."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import signal
import socket
import sys
from typing import Any

from agent.llm import sdk as llm_sdk
from gateway.config import Config
from gateway.ops import systemd
from gateway.ops.collector import collector_on
from gateway.ops.logs import setup_logging
from gateway.ops.process import EXIT_HOME_IN_USE, EXIT_REFUSED, HomeInUse, HomeLock, daemon_pid, not_dumpable
from platforms.registry import PlatformUnavailable

log = logging.getLogger("chatgate")
COLLECT_AFTER_START = 0.25  # s: the start-up collection waits until the platforms' first polls are out


def add_parsers(sub: Any) -> None:
    sub.add_parser("run", help="run the gateway in the foreground")
    sub.add_parser("doctor", help="check the configuration, the LLM endpoint and the tokens")
    status_parser = sub.add_parser("status", help="is the daemon running, is it ready, what waits, what failed")
    status_parser.add_argument("--json", action="store_true", help="print it as JSON")


async def run(config: Config, _: argparse.Namespace) -> int:
    try:  # one daemon per home, before anything changes there (another one's turns, approvals, updates)
        home = HomeLock.take(config.home)
    except HomeInUse as exc:
        print(f"chatgate cannot start: {exc}", file=sys.stderr)
        return EXIT_HOME_IN_USE
    except OSError as exc:
        print(f"chatgate cannot start: cannot lock {exc.filename or config.home}: {exc.strerror or exc}",
              file=sys.stderr)
        return 1
    try:
        return await _serve(config)
    finally:
        home.release()


async def _serve(config: Config) -> int:
    """The daemon, from its checks to its orderly stop (the home is held)."""
    from gateway.ops.safety import AS_ROOT, running_as_root
    from gateway.runner import GatewayRunner, NothingToServe

    if problem := config.workspace_problem():
        print(f"chatgate cannot start: {problem}", file=sys.stderr)
        return 2
    not_dumpable()  # before any secret is read into memory from here on: children cannot read ours
    try:
        runner = GatewayRunner(config)
    except PlatformUnavailable as exc:
        print(f"chatgate cannot start: {exc}", file=sys.stderr)
        return 1
    setup_logging(config.gateway.log_level, config.secrets(), config.gateway.log_format)  # (a web chat token
    # made just now, at the first start, is one of them)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        await runner.start()
    except NothingToServe as exc:  # every platform refused for good (a bad token): restarting cannot help
        print(f"chatgate cannot start: {exc}", file=sys.stderr)
        await runner.stop()
        return EXIT_REFUSED
    except Exception as exc:  # a port taken, a database refused: one line, then an orderly stop
        reason = str(exc) if isinstance(exc, (OSError, RuntimeError)) else f"{type(exc).__name__}: {exc}"
        log.debug("start-up failed", exc_info=True)
        print(f"chatgate cannot start: {reason}", file=sys.stderr)
        await runner.stop()
        return 1
    if running_as_root():  # (once it is up: a refusal to start stays one line)
        log.warning("%s", AS_ROOT)
    print(f"chatgate is running{_where(config, runner)} (Ctrl-C stops)", flush=True)
    loop.call_later(COLLECT_AFTER_START, lambda: collector_on(started=True))
    sdk_loaded = asyncio.create_task(llm_sdk(), name="openai import")  # off the path to ready, before the first message
    systemd.notify(f"READY=1\nSTATUS=running {runner.summary()}")  # (serving: a platform still down is not waited for)
    interval = systemd.watchdog_interval()
    watchdog = asyncio.create_task(systemd.feed_watchdog(interval), name="watchdog") if interval else None
    waiters = [asyncio.ensure_future(stop.wait()), asyncio.ensure_future(runner.failed.wait())]
    await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
    for waiter in waiters:
        waiter.cancel()
    log.info("stopping: finishing running turns (up to %.0fs)", config.gateway.drain_seconds)
    systemd.notify("STOPPING=1")
    await runner.stop()  # (the watchdog is fed while draining: a long drain is not a hang)
    if watchdog is not None:
        watchdog.cancel()
    sdk_loaded.cancel()
    if runner.failure:  # every platform refused for good meanwhile
        print(f"chatgate stopped: {runner.failure}", file=sys.stderr)
        return EXIT_REFUSED
    return 0


def _local_url(config: Config, port: int) -> str:
    """The gateway's HTTP server as reached from this machine (loopback when it listens everywhere)."""
    host = config.http.host if config.http.host not in ("0.0.0.0", "::", "") else "127.0.0.1"
    return f"http://{host if ':' not in host else f'[{host}]'}:{port}"


def _where(config: Config, runner: Any) -> str:
    """": open <the web chat's address>" when there is a page to open. Its token only on a terminal:
    printed into a log or the journal it would be readable by whatever reads those."""
    assert runner.http is not None
    base = config.http.public_url or _local_url(config, runner.http.port)
    urls = [url for adapter in runner.adapters.values() if (url := adapter.entry_url(base))]
    if not urls:
        return f" (HTTP on {base})"
    if sys.stdout.isatty() or "?" not in urls[0]:
        return f": open {urls[0]}"
    return f": open {urls[0].split('?', 1)[0]} (`chatgate status` prints the link with its token)"


def _chat_link(config: Config) -> str | None:
    """The web chat's link with its token, when the web chat is on."""
    from platforms import registry
    from platforms.webchat.access import entry_url, known_token

    sections = config.platforms.sections()
    if "webchat" not in registry.wanted(sections):
        return None
    token = sections["webchat"].token  # type: ignore[attr-defined]
    base = config.http.public_url or _local_url(config, config.http.port)
    return entry_url(base.rstrip("/"), known_token(token.get_secret_value() if token is not None else None,
                                                   config.home))


async def doctor(config: Config, _: argparse.Namespace) -> int:
    from gateway.ops.doctor import run_doctor

    lines: list[str] = []
    ok = await run_doctor(config, lines)
    print("\n".join(lines))
    print("all good" if ok else "problems found")
    return 0 if ok else 1


async def status(config: Config, args: argparse.Namespace) -> int:
    """0: running and ready; 1: running, not ready; 3: not running (as `systemctl status`)."""
    from gateway.cli.state import open_store
    from gateway.cron.ledger import RunLedger
    from gateway.storage.database import SchemaError

    pid = daemon_pid(config.home)  # the daemon holding the home (its pid file says which)
    report: dict[str, Any] = {"home": str(config.home), "running": pid is not None, "pid": pid, "ready": None,
                              "platforms": {}, "storage": None, "instances": []}
    if config.db_path.exists():
        try:
            async with open_store(config) as store:
                instances = await RunLedger(store, "status").live_instances(
                    stale_after=3 * config.gateway.tick_seconds)
                report["instances"] = [{"pid": i["pid"], "host": i["host"], "since": i["started_at"]}
                                       for i in instances]
                if pid == 0:  # its pid file was deleted: the pid it registered in the database says which
                    report["pid"] = next((i["pid"] for i in instances if i["host"] == socket.gethostname()), 0)
                report["running"] = report["running"] or bool(instances)
                report["queue"] = await store.inbox.queue_counts()
                report["trouble"] = await store.inbox.trouble_counts()
                report["last_errors"] = await store.inbox.recent_errors()
        except SchemaError as exc:
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

    url = f"{_local_url(config, config.http.port)}/readyz"
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=3)) as http, http.get(url) as response:
            body = await response.json()
            return bool(body.get("ready")), dict(body.get("platforms") or {}), body.get("storage")
    except (aiohttp.ClientError, OSError, ValueError, TimeoutError):
        return None, {}, None


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
        if report["ready"] and any(p.get("state") != "ready" for p in report["platforms"].values()):
            ready = "ready, degraded (a platform is not)"
        print(f"chatgate is running ({where}): {ready}")
        parts = {**report["platforms"], **({"storage": report["storage"]} if report["storage"] else {})}
        for name, state in parts.items():
            error = f" — {state['error']}" if state.get("error") else ""
            error += f" ({state['waiting']} turn(s) waiting for it)" if state.get("waiting") else ""
            print(f"  {name:<9} {state['state']} since {when(state['since'])}{error}")
        if report.get("web_chat"):
            print(f"web chat: {report['web_chat']}")
    if report.get("database"):
        print(f"database: {report['database']}")
    if "queue" in report:
        q, t = report["queue"], report["trouble"]
        print(f"messages: {q['waiting']} waiting, {q['running']} running; replies: {q['outbox_pending']} to send")
        print(f"trouble: {t['failed_turns']} failed turns, {t['failed_deliveries']} undeliverable replies, "
              f"{t['dead_letters']} dead letters")
        for e in report["last_errors"]:
            print(f"  {when(e['at'])} {e['what']:<5} {e['platform']}: {(e['error'] or '')[:160]}")


HANDLERS = {"run": run, "doctor": doctor, "status": status}
