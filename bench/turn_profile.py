#!/usr/bin/env python3
"""Where a turn's CPU goes: one scenario of the shared harness (../shared/bench) with py-spy attached.

    .venv/bin/python bench/turn_profile.py [--scenario overhead|fan-in-large] [--messages 400] [--raw FILE]

Runs `run_bench.py` (a `chatgate run` of this checkout's .venv against the fake Telegram and fake LLM), attaches
`py-spy record --gil --nonblocking` once the gateway is up (install py-spy anywhere: `--py-spy PATH`), reads each
thread's CPU from /proc, and prints per answer: the CPU of each thread (user and system), then the GIL's samples
by part of the turn and by the package whose code was running. `--gil` samples the thread that holds the GIL, so
the tables count Python's work; the kernel's (loopback sockets, fsync) and SQLite's own show only in the first.
A profile slows the gateway: take the figures from run_bench.py or bench/paired_ab.sh, the shares from here.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
PARTS = [  # (part, a frame anywhere in the sample's stack), the first that matches
    ("sqlite thread", r"_connection_worker_thread"),
    ("other threads", r"^Thread\._bootstrap"),
    ("telegram send", r"Bot\._post|do_api_request"),
    ("telegram in: poll, parse", r"TelegramAdapter\._poll|TelegramAdapter\._read|TelegramAdapter\._take_batch"),
    ("inbound: store, queue", r"Inbound\.|InboxStore"),
    ("turn open", r"Turns\._open"),
    ("llm request, stream", r"LLMClient\._stream|LLMClient\.complete|openai/"),
    ("agent loop", r"Agent\.run_turn"),
    ("preview, typing", r"[Pp]review|[Tt]yping"),
    ("turn finish, delivery", r"Turns\._finish|Delivery\.|final_reply"),
    ("outbox", r"[Oo]utbox"),
    ("turn, other", r"Turns\.|SessionWorker"),
    ("storage (loop side)", r"Database\.|Store\.|aiosqlite"),
    ("aiohttp, other", r"aiohttp"),
]
IDLE = r"Runner\.run \(.*runners\.py:118\)$|core\.py:59\)$|thread\.py:81\)$|selectors\.py"
STDLIB = {"asyncio", "json", "concurrent", "threading", "ssl", "typing", "contextlib", "functools", "selectors",
          "socket", "dataclasses", "logging", "enum", "weakref", "_weakrefset", "abc", "re", "email", "importlib",
          "collections", "inspect", "copy", "urllib", "http", "pathlib", "posixpath"}


def threads(pid: int) -> dict[str, tuple[int, int]]:
    """Each thread's (user, system) clock ticks."""
    found = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        found[task.name] = (int(fields[11]), int(fields[12]))
    return found


def package(frame: str) -> str:
    match = re.search(r"\((.*?):\d+\)", frame)
    head = (match.group(1) if match else frame).split("/")[0].replace(".py", "")
    if head in ("gateway", "agent", "platforms"):
        return "ours (gateway, agent, platforms)"
    if head.startswith("<frozen") or head in STDLIB:
        return f"stdlib: {head.strip('<>')}"
    return head or "(no Python frame)"


def tables(raw: Path, answers: int, rate: int) -> None:
    parts: collections.Counter[str] = collections.Counter()
    packages: collections.Counter[str] = collections.Counter()
    total = 0
    for line in raw.read_text().splitlines():
        if not line.strip():
            continue
        stack, count = line.rsplit(" ", 1)
        frames, n = stack.split(";"), int(count)
        if re.search(IDLE, frames[-1]):
            continue
        total += n
        parts[next((name for name, rx in PARTS if re.search(rx, stack, re.M)), "other")] += n
        packages[package(frames[-1])] += n
    per = 1000 / rate / answers
    print(f"\nGIL samples: {total * per:.2f} ms per answer (py-spy at {rate} Hz; it slows the gateway)")
    for title, counter in (("by part of the turn", parts), ("by package running (self)", packages)):
        print(f"  {title}:")
        for name, n in counter.most_common(14):
            print(f"    {n / total * 100:5.1f} %  {n * per:5.2f} ms  {name}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenario", default="overhead", help="a run_bench.py scenario (overhead: A, fan-in-large: C)")
    parser.add_argument("--messages", type=int, default=400, help="overhead: messages in the one chat")
    parser.add_argument("--rate", type=int, default=1000, help="py-spy samples per second")
    parser.add_argument("--py-spy", default=shutil.which("py-spy") or "py-spy")
    parser.add_argument("--raw", type=Path, help="keep py-spy's collapsed stacks here")
    parser.add_argument("--bench", type=Path, default=Path(os.environ.get("CHATGATE_SHARED_BENCH", HERE.parent / "shared" / "bench")))
    options = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="turn-profile-"))
    raw = options.raw or work / "stacks.txt"
    override = {"overhead": {"msgs_per_chat": options.messages}} if options.scenario == "overhead" else {}
    venv = HERE / ".venv"
    bench = subprocess.Popen(
        [sys.executable, "run_bench.py", "--gateway-cmd", "gateways/chatgate.sh", "--scenarios", options.scenario,
         "--repeat", "1", "--override", json.dumps(override), "--out", str(work / "bench")],
        cwd=options.bench, env={**os.environ, "CHATGATE_VENV": str(venv)},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    pid = None
    while pid is None and bench.poll() is None:
        found = subprocess.run(["pgrep", "-f", f"{venv}/bin/chatgate run"], capture_output=True, text=True).stdout
        pid = int(found.split()[0]) if found.split() else None
        time.sleep(0.05)
    assert pid is not None, "the gateway did not start"
    time.sleep(1.2)  # (ready, and the harness's settle: the scenario's turns are what is sampled)
    before = threads(pid)
    spy = subprocess.Popen([options.py_spy, "record", "--pid", str(pid), "--rate", str(options.rate), "--format",
                            "raw", "--gil", "--nonblocking", "--output", str(raw)],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    latest = dict(before)
    while bench.poll() is None:
        try:
            latest.update({t: v for t, v in threads(pid).items() if v >= latest.get(t, (0, 0))})
        except OSError:
            pass
        time.sleep(0.1)
    spy.send_signal(2)
    spy.wait()
    run = json.loads((work / "bench" / "runs.jsonl").read_text().splitlines()[0])
    answers = int(run["result"]["completed"]) + len(run["result"].get("warmup") or ())
    tick = os.sysconf("SC_CLK_TCK")
    print(f"{options.scenario}: {answers} answers; CPU per answer by thread (user + system, /proc):")
    for tid, (user, system) in sorted(latest.items()):
        start = before.get(tid, (0, 0))
        spent = (user - start[0], system - start[1])
        if sum(spent):
            print(f"  thread {tid}: {sum(spent) / tick / answers * 1000:5.2f} ms (user {spent[0] / tick / answers * 1000:.2f},"
                  f" system {spent[1] / tick / answers * 1000:.2f})")
    tables(raw, answers, options.rate)


if __name__ == "__main__":
    main()
