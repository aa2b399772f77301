"""`chatgate run` and `chatgate doctor`: the daemon in the foreground, and the check before it."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from typing import Any

from gateway.config import Config
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


async def doctor(config: Config, _: argparse.Namespace) -> int:
    from gateway.ops.doctor import run_doctor

    lines: list[str] = []
    ok = await run_doctor(config, lines)
    print("\n".join(lines))
    print("all good" if ok else "problems found")
    return 0 if ok else 1


HANDLERS = {"run": run, "doctor": doctor}
