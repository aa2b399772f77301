#!/usr/bin/env python3
"""Scheduler benchmark: how late jobs fire, and what the tick costs with many jobs.

Two parts (both print figures; nothing is asserted about time):

* **Lateness** (``--lateness``): a real ``chatgate run`` process (web chat only, the fake LLM in
  its own process, the default 60 s tick, so only the per-job timers can fire a job on time) and
  100 jobs written into its database by this process while it runs, the way the ``chatgate cron``
  CLI does. For every run it records *claim* lateness (the ledger's ``started_at``, set when the
  slot is claimed, − the scheduled time: timer + claim) and *delivered* lateness (the moment the web chat tab received
  the result − the scheduled time: + the agent turn with a 0 s LLM + the outbox). Scenarios:

  - ``spread``: 100 one-shot jobs, 10 at each of 10 consecutive seconds;
  - ``burst``: 100 one-shot jobs at the same instant (``cron.max_concurrent_runs`` = 4 limits
    how many run at once, so this shows queueing, not timer accuracy);
  - ``every``: 100 ``every 20s`` jobs created 100 ms apart, two rounds each (the timer of the
    next slot is re-armed by the run before it).

* **Tick cost** (``--tick``): in this process, a store with 10,000 jobs and the real
  ``Scheduler`` (with a no-op run and the prune hook), then ``tick()`` timed ``--ticks`` times.
  ``daily``: 10,000 cron jobs at random times of day (a handful due within the two-tick
  horizon); ``all-due``: 10,000 ``every 1m`` jobs, so every job has a timer armed. The first
  tick of ``all-due`` arms the 10,000 timers and is reported apart.

Usage::

    .venv/bin/python bench/cron_bench.py                 # both parts, 3 repeats (~4 minutes)
    .venv/bin/python bench/cron_bench.py --tick --repeat 5
    .venv/bin/python bench/cron_bench.py --lateness --scenarios spread,burst

Talks only to 127.0.0.1.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import random
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gateway_load as gl  # noqa: E402  (the gateway and fake-LLM processes, percentiles)

from gateway.cron.jobs import CronJobs  # noqa: E402
from gateway.cron.ledger import RunLedger, new_instance_id  # noqa: E402
from gateway.cron.timers import CronTimers  # noqa: E402
from gateway.storage import Store  # noqa: E402
from gateway.tick import Tick  # noqa: E402

JOBS = 100
TAB = "cronbench01"
HEADER = re.compile(r"⏰ (bench-\d+)")
SCENARIOS = ("spread", "burst", "every")


# -- lateness ----------------------------------------------------------------------------------


async def receive(ws: Any, arrived: dict[str, list[float]], hello: asyncio.Event) -> None:
    import aiohttp

    async for msg in ws:
        t = time.time()
        if msg.type != aiohttp.WSMsgType.TEXT:
            continue
        frame = json.loads(msg.data)
        if frame.get("ack"):  # confirm, as the page does: the reply counts as delivered only then
            await ws.send_str(json.dumps({"type": "received", "message_id": frame.get("message_id")}))
        if frame.get("type") == "hello":
            hello.set()
        elif frame.get("type") in ("message", "edit") and frame.get("final"):
            m = HEADER.search(frame.get("text", ""))
            if m:
                arrived.setdefault(m.group(1), []).append(t)


async def create_jobs(jobs: CronJobs, scenario: str, t0: float) -> int:
    """Write the scenario's jobs; return how many runs to expect."""
    common = {"prompt": "say hi", "owner_platform": "webchat", "owner_id": "bench", "target": f"webchat:{TAB}"}
    for i in range(JOBS):
        if scenario == "every":
            await jobs.create(name=f"bench-{i}", schedule="every 20s", **common)
            await asyncio.sleep(0.1)
            continue
        at = math.ceil(t0) + (i // 10 if scenario == "spread" else 0)  # `at` has whole seconds
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(at))
        await jobs.create(name=f"bench-{i}", schedule=f"at {stamp}", **common)
    return 2 * JOBS if scenario == "every" else JOBS


async def lateness_run(llm: gl.LLMProcess, scenario: str, placement: gl.Placement, workdir: Path) -> dict[str, Any]:
    import aiohttp

    gw = gl.Gateway(llm.base_url, placement, workdir, {"CHATGATE_CRON__MIN_INTERVAL_SECONDS": "1"})
    await gw.start()
    arrived: dict[str, list[float]] = {}
    store = await Store.open(gw.home / "state.db")
    try:
        async with aiohttp.ClientSession() as http:
            ws = await http.ws_connect(f"http://127.0.0.1:{gw.port}/ws?chat={TAB}&token={gl.WEBCHAT_TOKEN}")
            hello = asyncio.Event()
            reader = asyncio.create_task(receive(ws, arrived, hello))
            await asyncio.wait_for(hello.wait(), 30)
            jobs = CronJobs(store.cron, min_interval=1)
            # 3 s ahead: the daemon notices another process's writes within a second
            expected = await create_jobs(jobs, scenario, time.time() + 3.0)
            deadline = time.time() + (60 if scenario == "every" else 30)
            while sum(map(len, arrived.values())) < expected and time.time() < deadline:
                await asyncio.sleep(0.2)
            if scenario == "every":  # stop the third round before reading the ledger
                for job in await jobs.list():
                    await jobs.set_enabled(job.id, False)
            await asyncio.sleep(1.0)  # a duplicate, if there were one, would arrive now
            await ws.close()
            await asyncio.gather(reader, return_exceptions=True)
        rows = await store.fetch("SELECT j.name, r.scheduled_at, r.started_at, r.state FROM cron_runs r"
                                 " JOIN cron_jobs j ON j.id = r.job_id ORDER BY r.scheduled_at")
    finally:
        await store.close()
        await gw.stop()
        shutil.rmtree(gw.home, ignore_errors=True)
    start, delivered, states = [], [], {}
    per_job: dict[str, list[float]] = {}
    for r in rows:
        states[r["state"]] = states.get(r["state"], 0) + 1
        if r["started_at"] is not None:
            start.append(r["started_at"] - r["scheduled_at"])
        per_job.setdefault(r["name"], []).append(r["scheduled_at"])
    duplicates = 0
    for name, slots in per_job.items():
        got = sorted(arrived.get(name, []))
        duplicates += max(0, len(got) - len(slots))
        delivered += [t - s for t, s in zip(got, sorted(slots))]
    return {"scenario": scenario, "runs": len(rows), "expected": expected, "states": states,
            "delivered": len(delivered), "duplicates": duplicates, "start": start, "delivery": delivered}


# -- tick cost ---------------------------------------------------------------------------------


async def noop_run(claim: Any) -> None:
    return None


async def loop_stalls(found: list[float], period: float = 0.001) -> None:
    """Record how much later than asked each 1 ms sleep wakes: the event loop's stalls."""
    while True:
        t = time.perf_counter()
        await asyncio.sleep(period)
        found.append(time.perf_counter() - t - period)


async def tick_run(kind: str, n_jobs: int, ticks: int, workdir: Path) -> dict[str, Any]:
    home = Path(tempfile.mkdtemp(prefix="tick-", dir=workdir))
    store = await Store.open(home / "state.db")
    try:
        jobs = CronJobs(store.cron)
        rnd = random.Random(7)
        t_create = time.perf_counter()
        for i in range(n_jobs):
            schedule = f"{rnd.randrange(60)} {rnd.randrange(24)} * * *" if kind == "daily" else "every 1m"
            await jobs.create(name=f"job-{i}", prompt="p", schedule=schedule, owner_platform="webchat",
                              owner_id="u", target="none")
        create_s = time.perf_counter() - t_create
        tick = Tick(60)
        timers = CronTimers(tick, store.cron, RunLedger(store.cron, new_instance_id()), grace_seconds=3600)
        timers.serve(noop_run)
        tick.add_hook("prune", lambda: store.inbox.prune(time.time() - 7 * 86400))
        rss0 = gl.proc_status_kb(gl.os.getpid(), "VmRSS") or 0
        stalls: list[float] = []
        watcher = asyncio.create_task(loop_stalls(stalls))
        await asyncio.sleep(0.01)
        cpu0, wall0 = time.process_time(), time.perf_counter()
        await tick.start()
        await timers.start()  # registers this instance
        await tick.run_hooks()  # the first tick, which arms the due timers
        await tick.wait_idle()
        first = (time.perf_counter() - wall0, time.process_time() - cpu0)
        await asyncio.sleep(0.01)
        watcher.cancel()
        rss1 = gl.proc_status_kb(gl.os.getpid(), "VmRSS") or 0
        walls, cpus = [], []
        for _ in range(ticks):
            cpu0, wall0 = time.process_time(), time.perf_counter()
            await tick.run_hooks()
            await tick.wait_idle()
            walls.append(time.perf_counter() - wall0)
            cpus.append(time.process_time() - cpu0)
        armed = len(timers._armed)
        await timers.stop(1.0)
        await tick.stop(1.0)
    finally:
        await store.close()
        shutil.rmtree(home, ignore_errors=True)
    return {"kind": kind, "jobs": n_jobs, "armed": armed, "create_s": create_s, "first_wall": first[0],
            "first_cpu": first[1], "first_stall": max(stalls, default=math.nan), "rss_armed_mb": (rss1 - rss0) / 1024, "tick_wall": gl.med(walls),
            "tick_cpu": gl.med(cpus)}


# -- report ------------------------------------------------------------------------------------


def ms(value: float) -> str:
    return "-" if math.isnan(value) else f"{value * 1000:.1f}"


async def main_async(args: argparse.Namespace) -> int:
    workdir = Path(tempfile.mkdtemp(prefix="cron-bench-"))
    print(f"load average at start: {gl.os.getloadavg()[0]:.2f}", flush=True)
    try:
        if args.lateness:
            placement = gl.Placement(not args.no_pin)
            llm = gl.LLMProcess(0.0)
            await llm.start()
            try:
                print("\nlateness (ms; medians over runs of each run's p50 / p99 / max)")
                print(f"{'scenario':10} {'runs':>9} {'claim p50':>10} {'p99':>8} {'max':>8} "
                      f"{'delivered p50':>14} {'p99':>8} {'max':>8}  states / duplicates")
                for scenario in args.scenarios:
                    results = []
                    for _ in range(args.repeat):
                        results.append(await lateness_run(llm, scenario, placement, workdir))
                    row = {}
                    for key in ("start", "delivery"):
                        row[key] = [gl.med([gl.pct(r[key], q) for r in results]) for q in (0.5, 0.99, 1.0)]
                    runs = "/".join(f"{r['delivered']}" for r in results) + f" of {results[0]['expected']}"
                    states = "; ".join(",".join(f"{k}={v}" for k, v in sorted(r["states"].items())) for r in results)
                    print(f"{scenario:10} {runs:>9} {ms(row['start'][0]):>10} {ms(row['start'][1]):>8} "
                          f"{ms(row['start'][2]):>8} {ms(row['delivery'][0]):>14} {ms(row['delivery'][1]):>8} "
                          f"{ms(row['delivery'][2]):>8}  {states} / dup {sum(r['duplicates'] for r in results)}",
                          flush=True)
            finally:
                await llm.stop()
        if args.tick:
            print(f"\ntick cost with {args.jobs} jobs (medians over {args.repeat} runs; "
                  f"each run's figure is the median of {args.ticks} ticks)")
            print(f"{'jobs':10} {'armed':>6} {'tick wall ms':>13} {'tick CPU ms':>12} "
                  f"{'first tick ms':>14} {'its longest stall ms':>21} {'timers RSS MB':>14} {'create s':>9}")
            for kind in ("daily", "all-due"):
                rs = [await tick_run(kind, args.jobs, args.ticks, workdir) for _ in range(args.repeat)]
                print(f"{kind:10} {gl.med([r['armed'] for r in rs]):>6.0f} {ms(gl.med([r['tick_wall'] for r in rs])):>13}"
                      f" {ms(gl.med([r['tick_cpu'] for r in rs])):>12} {ms(gl.med([r['first_wall'] for r in rs])):>14}"
                      f" {ms(gl.med([r['first_stall'] for r in rs])):>21}"
                      f" {gl.med([r['rss_armed_mb'] for r in rs]):>14.1f} {gl.med([r['create_s'] for r in rs]):>9.1f}",
                      flush=True)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print(f"\nload average at end: {gl.os.getloadavg()[0]:.2f}")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--lateness", action="store_true", help="only the lateness part")
    p.add_argument("--tick", action="store_true", help="only the tick-cost part")
    p.add_argument("--scenarios", default=",".join(SCENARIOS), help=f"lateness scenarios ({', '.join(SCENARIOS)})")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--jobs", type=int, default=10_000, help="jobs in the tick-cost store")
    p.add_argument("--ticks", type=int, default=20, help="ticks timed per tick-cost run")
    p.add_argument("--no-pin", action="store_true", help="do not pin the gateway to its own CPU")
    args = p.parse_args(argv)
    if not args.lateness and not args.tick:
        args.lateness = args.tick = True
    args.scenarios = [s for s in args.scenarios.split(",") if s]
    unknown = set(args.scenarios) - set(SCENARIOS)
    if unknown:
        p.error(f"unknown scenario(s): {', '.join(sorted(unknown))}")
    return asyncio.run(main_async(args))


if __name__ == "__main__":
    sys.exit(main())
