#!/usr/bin/env python3
"""`make bench`: the performance table of the performance issue, and the per-platform overhead.

1. The four Telegram scenarios (ready, idle RSS, 1 chat x 50 messages, 100 chats at once,
   500 chats x 2) from the black-box harness in `../shared/bench` (`--harness`), run against a
   real `chatgate run` from this checkout's virtualenv, medians of `--repeat` launches,
   interleaved so that a slow phase of a noisy machine spreads over all scenarios.
2. Intake -> reply overhead on Discord, Slack and Telegram (`bench/platform_overhead.py`, the
   test suite's fakes and the real client libraries).

It prints figures and the load average; it asserts nothing. Talks only to 127.0.0.1.

    .venv/bin/python bench/table.py --repeat 3
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = "cold-start,overhead,fan-in,fan-in-large"
ROWS = [  # (label, scenario, figure, scale, unit, target)
    ("ready (launch -> first getUpdates)", "cold-start", "ready_s", 1.0, "s", "<= 0.5"),
    ("idle RSS", "cold-start", "idle_rss_mb", 1.0, "MB", "<= 50"),
    ("A: 1 chat x 50, LLM 0 s: reply p50", "overhead", "done_p50_s", 1000.0, "ms", "<= 5"),
    ("A: reply p99", "overhead", "done_p99_s", 1000.0, "ms", "<= 15"),
    ("B: 100 chats at once, LLM 1 s: all answered", "fan-in", "wall_s", 1.0, "s", "<= 1.2"),
    ("C: 500 chats x 2, LLM 1 s: all 1,000 answered", "fan-in-large", "wall_s", 1.0, "s", "<= 5"),
]


def shared_table(harness: Path, repeat: int, python: str) -> list[str]:
    out = Path(tempfile.mkdtemp(prefix="chatgate-bench-"))
    env = {**os.environ, "CHATGATE_VENV": sys.prefix}  # this virtualenv: its `chatgate` is this checkout
    subprocess.run([python, "run_bench.py", "--gateway-cmd", "gateways/chatgate.sh", "--scenarios", SCENARIOS,
                    "--repeat", str(repeat), "--repeat-cold", str(max(repeat, 5)), "--interleave", "--out", str(out)],
                   cwd=harness, env=env, check=True, stdout=subprocess.DEVNULL,
                   stderr=(out / "progress.log").open("w"))
    summary = json.loads((out / "summary.json").read_text())
    lines = ["| scenario | chatgate | target |", "|---|---|---|"]
    for label, scenario, figure, scale, unit, target in ROWS:
        value = summary.get(scenario, {}).get(figure)
        shown = f"{value * scale:.3g} {unit}" if isinstance(value, (int, float)) else "-"
        lines.append(f"| {label} | {shown} | {target} {unit} |")
    large = summary.get("fan-in-large", {})
    if large.get("gateway_cpu_s") is not None:
        per_turn = large["gateway_cpu_s"] / max(1, min(large.get("completed") or [1000])) * 1000
        lines.append(f"| gateway CPU per answered message (C) | {per_turn:.2f} ms | <= 3 ms |")
    lost = {name: (sum(s.get("missing") or []), sum(s.get("duplicates") or [])) for name, s in summary.items()}
    lines.append(f"\nmissing / duplicates per scenario, all runs: {lost}")
    lines.append(f"medians of {repeat} runs ({max(repeat, 5)} for cold-start); runs and progress in {out}; "
                 f"load average now {os.getloadavg()[0]:.2f}")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--harness", type=Path, default=ROOT.parent / "shared" / "bench")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--turns", type=int, default=100, help="turns per platform overhead run")
    args = parser.parse_args()
    print(f"load average at start: {os.getloadavg()[0]:.2f}")
    if (args.harness / "run_bench.py").is_file():
        print("\n".join(shared_table(args.harness, args.repeat, sys.executable)))
    else:
        print(f"(no benchmark harness at {args.harness}: --harness DIR; the Telegram scenarios are skipped)")
    print()
    subprocess.run([sys.executable, str(ROOT / "bench" / "platform_overhead.py"), "--platforms",
                    "discord,slack,telegram", "--turns", str(args.turns), "--repeat", str(args.repeat)], check=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
