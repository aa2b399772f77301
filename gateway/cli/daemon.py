"""`chatgate run` and `chatgate doctor`: the daemon in the foreground, and the check before it."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from typing import Any

from gateway.config import Config
from gateway.ops import systemd
from platforms.registry import PlatformUnavailable

log = logging.getLogger("chatgate")


def add_parsers(sub: Any) -> None:
    sub.add_parser("run", help="run the gateway in the foreground")
    sub.add_parser("doctor", help="check the configuration, the LLM endpoint and the tokens")


async def run(config: Config, _: argparse.Namespace) -> int:
    from gateway.runner import GatewayRunner

    try:
        runner = GatewayRunner(config)
    except PlatformUnavailable as exc:
        print(f"chatgate cannot start: {exc}", file=sys.stderr)
        return 1
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        await runner.start()
    except Exception as exc:  # a platform unreachable, a port taken, a bad token: one line, then an orderly stop
        reason = str(exc) if isinstance(exc, (OSError, RuntimeError)) else f"{type(exc).__name__}: {exc}"
        log.debug("start-up failed", exc_info=True)
        print(f"chatgate cannot start: {reason}", file=sys.stderr)
        await runner.stop()
        return 1
    print(f"chatgate is running{_where(config, runner)} (Ctrl-C stops)", flush=True)
    systemd.notify(f"READY=1\nSTATUS=running with {', '.join(runner.adapters)}")
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
    if runner.failure:
        print(f"chatgate stopped: {runner.failure}", file=sys.stderr)
        return 1
    return 0


def _where(config: Config, runner: Any) -> str:
    """": open <the web chat's address>" when there is a page to open (with its token)."""
    assert runner.http is not None
    host = config.http.host if config.http.host not in ("0.0.0.0", "::", "") else "127.0.0.1"
    base = config.http.public_url or f"http://{host if ':' not in host else f'[{host}]'}:{runner.http.port}"
    urls = [url for adapter in runner.adapters.values() if (url := adapter.entry_url(base))]
    return f": open {urls[0]}" if urls else f" (HTTP on {base})"


async def doctor(config: Config, _: argparse.Namespace) -> int:
    from gateway.ops.doctor import run_doctor

    lines: list[str] = []
    ok = await run_doctor(config, lines)
    print("\n".join(lines))
    print("all good" if ok else "problems found")
    return 0 if ok else 1


HANDLERS = {"run": run, "doctor": doctor}
