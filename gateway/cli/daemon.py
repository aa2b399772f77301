"""`chatgate run` and `chatgate doctor`: the daemon in the foreground, and the check before it
(`chatgate status` is in gateway/cli/status.py: it must not pay for the LLM client these import)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from typing import Any

from gateway.cli.status import local_url
from gateway.config import Config
from gateway.ops import systemd
from gateway.ops.collector import collector_on
from gateway.ops.logs import setup_logging
from gateway.ops.process import EXIT_HOME_IN_USE, EXIT_REFUSED, HomeInUse, HomeLock, not_dumpable
from platforms.registry import PlatformUnavailable

log = logging.getLogger("chatgate")
COLLECT_AFTER_START = 0.25  # s: the start-up collection waits until the platforms' first polls are out


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
    warmed = asyncio.create_task(runner.warm(), name="warm-up")  # off the path to ready, before the first message
    systemd.notify(f"READY=1\nSTATUS=running {runner.connections.summary()}")  # (serving: a platform still down is not waited for)
    interval = systemd.watchdog_interval()
    watchdog = asyncio.create_task(systemd.feed_watchdog(interval), name="watchdog") if interval else None
    waiters = [asyncio.ensure_future(stop.wait()), asyncio.ensure_future(runner.connections.failed.wait())]
    await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
    for waiter in waiters:
        waiter.cancel()
    log.info("stopping: finishing running turns (up to %.0fs)", config.gateway.drain_seconds)
    systemd.notify("STOPPING=1")
    await runner.stop()  # (the watchdog is fed while draining: a long drain is not a hang)
    if watchdog is not None:
        watchdog.cancel()
    warmed.cancel()
    if runner.connections.failure:  # every platform refused for good meanwhile
        print(f"chatgate stopped: {runner.connections.failure}", file=sys.stderr)
        return EXIT_REFUSED
    return 0


def _where(config: Config, runner: Any) -> str:
    """": open <the web chat's address>" when there is a page to open. Its token only on a terminal:
    printed into a log or the journal it would be readable by whatever reads those."""
    assert runner.http is not None
    base = config.http.public_url or local_url(config, runner.http.port)
    urls = [url for adapter in runner.adapters.values() if (url := adapter.entry_url(base))]
    if not urls:
        return f" (HTTP on {base})"
    if sys.stdout.isatty() or "?" not in urls[0]:
        return f": open {urls[0]}"
    return f": open {urls[0].split('?', 1)[0]} (`chatgate status` prints the link with its token)"


async def doctor(config: Config, args: argparse.Namespace) -> int:
    from gateway.ops.doctor import run_doctor

    lines: list[str] = []
    ok = await run_doctor(config, lines, args.timeout)
    print("\n".join(lines))
    print("all good" if ok else "problems found")
    return 0 if ok else 1
