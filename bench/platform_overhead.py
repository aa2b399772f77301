#!/usr/bin/env python3
"""Intake → reply overhead of a real `chatgate run` on each chat platform, with a 0-latency LLM.

One person sends `--turns` messages one after another (the next as soon as the reply is there)
to a `chatgate run` subprocess connected to the in-process fake of the platform (the same fakes
the end-to-end tests use, the same real client libraries) and to a fake LLM that answers at once.
Per turn: the time from the platform event to the first bot message that carries the whole
answer, as the fake recorded it on its own clock. Printed: p50 / p90 / p99 over the turns after
`--warmup`, medians over `--repeat` runs (a fresh gateway each), and the gateway's CPU per turn.
It asserts nothing about time.

Usage::

    .venv/bin/python bench/platform_overhead.py --platforms discord,slack,telegram --turns 100 --repeat 3

Talks only to 127.0.0.1.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.fakes.llm import FakeLLM  # noqa: E402
from tests.harness import Daemon  # noqa: E402

CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    k = (len(ordered) - 1) * q
    low, high = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (k - low)


class Platform:
    """How to drive one platform's fake: its settings, a message in, the matching reply out."""

    name = ""

    async def __aenter__(self) -> "Platform":
        raise NotImplementedError

    async def __aexit__(self, *exc: object) -> None:
        await self.fake.stop()

    fake: Any
    settings: dict[str, Any]

    async def ready(self) -> None: ...

    def send(self, text: str) -> float:
        """Inject a message; return the fake's clock at that moment."""
        raise NotImplementedError

    async def replied(self, text: str) -> float:
        """The fake's clock when the first bot call carrying `text` arrived."""
        raise NotImplementedError


class Discord(Platform):
    name = "discord"

    async def __aenter__(self) -> "Discord":
        from tests.fakes.discord import FakeDiscord

        self.fake = await FakeDiscord().__aenter__()
        self.settings = {"platforms__discord__token": self.fake.token, "platforms__discord__api_base":
                         self.fake.api_base, "platforms__discord__gateway_url": self.fake.gateway_url,
                         "access__dm_policy": "open"}
        return self

    async def ready(self) -> None:
        await self.fake.wait_connected(timeout=30)

    def send(self, text: str) -> float:
        self.fake.user_message(text)
        return asyncio.get_running_loop().time()

    async def replied(self, text: str) -> float:
        return await _first_call(self.fake, lambda c: text in str((c.json or {}).get("content")),
                                 ("POST /channels/{channel_id}/messages",
                                  "PATCH /channels/{channel_id}/messages/{message_id}"))


class Telegram(Platform):
    name = "telegram"

    async def __aenter__(self) -> "Telegram":
        from tests.fakes.telegram import FakeTelegram

        self.fake = await FakeTelegram().__aenter__()
        self.settings = {"platforms__telegram__token": self.fake.token, "platforms__telegram__base_url":
                         self.fake.url, "access__dm_policy": "open"}
        return self

    async def ready(self) -> None:
        await self.fake.wait_for("getUpdates", timeout=30)

    def send(self, text: str) -> float:
        self.fake.user_message(text)
        return asyncio.get_running_loop().time()

    async def replied(self, text: str) -> float:
        return await _first_call(self.fake, lambda c: text in str(c.get("text")), ("sendMessage", "editMessageText"))


class Slack(Platform):
    name = "slack"

    async def __aenter__(self) -> "Slack":
        from tests.fakes.slack import FakeSlack

        self.fake = await FakeSlack().__aenter__()
        self.settings = {"platforms__slack__bot_token": self.fake.bot_token, "platforms__slack__app_token":
                         self.fake.app_token, "platforms__slack__api_base": self.fake.api_base,
                         "access__dm_policy": "open"}
        return self

    async def ready(self) -> None:
        await self.fake.wait_for_connections(1, timeout=30)

    def send(self, text: str) -> float:
        self.fake.user_message(text)
        return asyncio.get_running_loop().time()

    async def replied(self, text: str) -> float:
        return await _first_call(self.fake, lambda c: text in str(c.get("text")), ("chat.postMessage", "chat.update"))


PLATFORMS: dict[str, Callable[[], Platform]] = {"discord": Discord, "slack": Slack, "telegram": Telegram}


async def _first_call(fake: Any, carries: Callable[[Any], bool], methods: tuple[str, ...]) -> float:
    found: list[float] = []

    def seen() -> bool:
        found[:] = [c.time for c in fake.calls if getattr(c, "route", getattr(c, "method", None)) in methods
                    and c.status == 200 and carries(c)]
        return bool(found)

    async with fake._cond:
        await asyncio.wait_for(fake._cond.wait_for(seen), 30)
    return min(found)


async def one_run(kind: str, turns: int, warmup: int) -> tuple[list[float], float]:
    home = Path(tempfile.mkdtemp(prefix=f"overhead-{kind}-"))
    async with FakeLLM() as llm, PLATFORMS[kind]() as platform:
        daemon = Daemon(home, llm, platform.settings)
        daemon.start()
        try:
            await platform.ready()
            latencies: list[float] = []
            cpu_start = 0.0
            for n in range(warmup + turns):
                if n == warmup:
                    cpu_start = cpu_seconds(daemon.process.pid)  # type: ignore[union-attr]
                text = f"bench {n} {os.urandom(4).hex()}"
                sent = platform.send(text)
                latencies.append(await platform.replied(f"echo: {text}") - sent)
            cpu = cpu_seconds(daemon.process.pid) - cpu_start  # type: ignore[union-attr]
        finally:
            daemon.close()
    return latencies[warmup:], cpu / turns


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--platforms", default="discord,slack,telegram")
    parser.add_argument("--turns", type=int, default=100)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print(f"load average at start: {os.getloadavg()[0]:.2f}")
    print(f"{'platform':<10} {'turns':>5} {'p50 ms':>8} {'p90 ms':>8} {'p99 ms':>8} {'CPU ms/turn':>12}")
    for kind in args.platforms.split(","):
        runs = [asyncio.run(one_run(kind, args.turns, args.warmup)) for _ in range(args.repeat)]
        med = statistics.median
        print(f"{kind:<10} {args.turns:>5} {med(pct(r[0], .5) for r in runs) * 1000:>8.1f} "
              f"{med(pct(r[0], .9) for r in runs) * 1000:>8.1f} {med(pct(r[0], .99) for r in runs) * 1000:>8.1f} "
              f"{med(r[1] for r in runs) * 1000:>12.2f}")
    print(f"load average at end: {os.getloadavg()[0]:.2f}  (medians of {args.repeat} runs, a fresh gateway each)")


if __name__ == "__main__":
    main()
