#!/usr/bin/env python3
"""What 1,000 conversations leave in memory once they are idle.

A `chatgate run` subprocess on the fake Telegram (the test suite's, over loopback) and a fake LLM
that answers at once; `--chats` people send one message each, all at once, and once they are
idle as many other people do the same. Printed: the gateway's RSS at ready, right after each
wave's last reply and after its sessions went idle, and the peak. A session is idle after
`gateway.session_idle_seconds` (set short here): its worker exits, its queue and task are gone,
and the conversation lives on in the database only. Medians of
`--repeat` runs, a fresh gateway each. It asserts nothing. Talks only to 127.0.0.1.

    .venv/bin/python bench/idle_sessions.py --chats 1000 --repeat 3
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.fakes.llm import FakeLLM  # noqa: E402
from tests.fakes.telegram import FakeTelegram  # noqa: E402
from tests.harness import Daemon, eventually  # noqa: E402

IDLE_SECONDS = 2.0


def status_mb(pid: int, field: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def one_run(chats: int) -> dict[str, float]:
    async with FakeLLM() as llm, FakeTelegram() as tg:
        home = Path(tempfile.mkdtemp(prefix="chatgate-idle-"))
        daemon = Daemon(home, llm, {"platforms__telegram__token": tg.token, "platforms__telegram__base_url": tg.url,
                                    "access__dm_policy": "open", "gateway__log_level": "WARNING",
                                    "gateway__session_idle_seconds": IDLE_SECONDS})
        try:
            daemon.start()
            assert daemon.process is not None
            pid = daemon.process.pid
            await tg.wait_for("getUpdates", timeout=30)
            await asyncio.sleep(1.0)  # settled after start-up (the sandbox probe, the first tick)
            figures = {"ready": status_mb(pid, "VmRSS")}
            for wave in (1, 2):  # the second wave: as many other people, after the first went idle
                for n in range(chats):
                    tg.user_message(f"hello {n}", user_id=wave * 100_000 + n)
                await eventually(lambda: len(tg.calls_to("sendMessage")) >= wave * chats, 120, "every reply")
                figures[f"wave {wave}: replied"] = status_mb(pid, "VmRSS")
                await asyncio.sleep(IDLE_SECONDS + 1.0)  # every worker idle and gone
                figures[f"wave {wave}: idle"] = status_mb(pid, "VmRSS")
            figures["peak"] = status_mb(pid, "VmHWM")
            return figures
        finally:
            daemon.close()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chats", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    runs = [await one_run(args.chats) for _ in range(args.repeat)]
    print(f"{args.chats} chats, one message each; RSS in MB, medians of {args.repeat} runs "
          f"(load average {os.getloadavg()[0]:.2f})")
    for key in runs[0]:
        print(f"  {key:<18} {statistics.median(r[key] for r in runs):7.1f}")


if __name__ == "__main__":
    asyncio.run(main())
