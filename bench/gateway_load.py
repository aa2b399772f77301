#!/usr/bin/env python3
"""Load benchmark for the web chat front door of a real `chatgate run` process.

What it measures (and prints; it asserts nothing about time):

* start-up: spawn -> ``GET /healthz`` answers 200, and spawn -> "chatgate is running" on stdout
  (median of ``--launches`` launches), plus the gateway's VmRSS at that moment;
* for every LLM latency L (``--latency``) and number of concurrent web chat sessions N
  (``--sessions``): N websockets, each its own chat, one message sent on each at once; per turn
  the end-to-end latency (send -> the frame with ``"final": true``), the ack latency, the wall
  time of the burst, turns per second, the latency the gateway adds (e2e - L), whether every turn
  was answered within L + 2 s (3 s at L = 1 s), missing / duplicate / wrong replies, the
  gateway's CPU time per turn and its peak RSS (VmHWM). N = 1 runs ``--seq-turns`` sequential
  turns in one chat instead, to get a rate.

Every repetition starts a fresh gateway (fresh CHATGATE_HOME, fresh port), so VmHWM is the peak
of start-up + one warm-up turn + that scenario alone. Figures are medians over ``--repeat`` runs.

Where the processes run (2-core machine): the gateway is pinned to CPU 0 and has it to itself;
this load generator and the fake LLM run as two processes pinned to the other CPU(s). The fake
LLM is a separate process so its request handling does not sit in the same event loop as the
websocket readers that timestamp the replies. ``--no-pin`` leaves placement to the kernel. The
"gen CPU" column says how busy the generator core was; near 100 % the client, not the gateway,
limits the figures.

Usage::

    .venv/bin/python bench/gateway_load.py [--sessions 1,100,1000] [--latency 0,1] [--repeat 3] [--quick]
    .venv/bin/python bench/gateway_load.py --profile /tmp/prof   # py-spy record of each burst

Talks only to 127.0.0.1.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import secrets
import shutil
import signal
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import load_processes as lp  # noqa: E402
from load_processes import (  # noqa: E402,F401  (cron_bench.py reaches these through this module too)
    CLK_TCK, ROOT, WEBCHAT_TOKEN, Gateway, LLMProcess, Placement, clean_env, free_port, healthz_ok, med, now, pct,
    proc_cpu_seconds, proc_status_kb, raise_nofile, self_cpu_seconds, serve_llm)


# -- web chat clients --------------------------------------------------------------------------


@dataclass
class Turn:
    text: str
    t_send: float = math.nan
    t_ack: float = math.nan
    t_final: float = math.nan
    finals: dict[str, str] = field(default_factory=dict)  # message_id -> final text

    @property
    def expected(self) -> str:
        return "echo: " + self.text


class Tab:
    """One websocket = one web chat; records the turn in flight and what answered it."""

    def __init__(self, session: Any, port: int, chat_id: str) -> None:
        self.http = session
        self.url = f"http://127.0.0.1:{port}/ws?chat={chat_id}&token={WEBCHAT_TOKEN}"
        self.chat_id = chat_id
        self.ws: Any = None
        self.turns: list[Turn] = []
        self.done = asyncio.Event()
        self.hello = asyncio.Event()
        self.stray_finals = 0  # final frames for a message id of an earlier turn
        self.errors: list[str] = []
        self._reader: asyncio.Task[None] | None = None

    async def open(self) -> None:
        self.ws = await self.http.ws_connect(self.url, autoping=True, heartbeat=None, max_msg_size=0)
        self._reader = asyncio.create_task(self._read())
        await asyncio.wait_for(self.hello.wait(), 30)

    async def _read(self) -> None:
        import aiohttp

        seen: set[str] = set()
        async for msg in self.ws:
            t = now()
            if msg.type != aiohttp.WSMsgType.TEXT:
                continue
            frame = json.loads(msg.data)
            kind = frame.get("type")
            if frame.get("ack"):  # confirm a reply as the page does: it counts as delivered only then
                await self.ws.send_str(json.dumps({"type": "received", "message_id": frame.get("message_id")}))
            if kind == "hello":
                self.hello.set()
            elif not self.turns:
                continue
            elif kind == "ack":
                turn = self.turns[-1]
                if frame.get("id") == f"{self.chat_id}-{len(self.turns)}" and math.isnan(turn.t_ack):
                    turn.t_ack = t
            elif kind in ("message", "edit") and frame.get("final"):
                mid = frame.get("message_id", "")
                turn = self.turns[-1]
                if mid in seen and mid not in turn.finals:
                    self.stray_finals += 1
                    continue
                seen.add(mid)
                turn.finals[mid] = frame.get("text", "")
                if math.isnan(turn.t_final):
                    turn.t_final = t
                    self.done.set()
            elif kind == "error":
                self.errors.append(str(frame.get("text")))

    async def send(self, text: str) -> None:
        turn = Turn(text)
        self.turns.append(turn)
        self.done.clear()
        frame = json.dumps({"type": "message", "id": f"{self.chat_id}-{len(self.turns)}", "text": text})
        turn.t_send = now()
        await self.ws.send_str(frame)

    async def close(self) -> None:
        if self.ws is not None:
            await self.ws.close()
        if self._reader is not None:
            await asyncio.gather(self._reader, return_exceptions=True)


# -- one scenario run --------------------------------------------------------------------------


@dataclass
class RunResult:
    latency: float
    sessions: int
    turns: int
    e2e: list[float]
    ack: list[float]
    wall: float
    missing: int
    duplicates: int
    wrong: int
    within: int  # turns answered within latency + 2 s
    gw_cpu: float  # seconds of gateway CPU during the load
    gen_cpu: float  # seconds of generator + fake LLM CPU during the load
    llm_calls: int
    idle_rss_kb: int | None
    hwm_kb: int | None
    first5: float = math.nan  # N=1 only: median e2e of the first 5 and the last 5 sequential turns
    last5: float = math.nan

    @property
    def rate(self) -> float:
        return self.turns / self.wall if self.wall > 0 else math.nan


async def open_tabs(http: Any, port: int, ids: list[str], concurrency: int = 100) -> list[Tab]:
    sem = asyncio.Semaphore(concurrency)
    tabs = [Tab(http, port, chat_id) for chat_id in ids]

    async def one(tab: Tab) -> None:
        async with sem:
            await tab.open()

    await asyncio.gather(*(one(t) for t in tabs))
    return tabs


async def run_scenario(llm: LLMProcess, sessions: int, seq_turns: int, placement: Placement, workdir: Path,
                       profile: Path | None, tag: str, extra_env: dict[str, str]) -> RunResult:
    import aiohttp

    latency = llm.latency
    gw = Gateway(llm.base_url, placement, workdir, extra_env)
    await gw.start()
    connector = aiohttp.TCPConnector(limit=0, force_close=False)
    http = aiohttp.ClientSession(connector=connector)
    tabs: list[Tab] = []
    spy: asyncio.subprocess.Process | None = None
    try:
        # one warm-up turn: the LLM client's session opens at first use
        [warm] = await open_tabs(http, gw.port, ["warmup-" + secrets.token_hex(4)])
        await warm.send("warm up")
        await asyncio.wait_for(warm.done.wait(), 60)
        await warm.close()
        await gw.settle()
        idle_rss = gw.rss_kb()

        run_id = secrets.token_hex(3)
        tabs = await open_tabs(http, gw.port, [f"b{run_id}-{i:05d}" for i in range(sessions)])
        await gw.settle()  # the connects' outbox flushes are done
        llm_before = await llm.served()
        if profile is not None:
            spy = await start_spy(gw.pid, profile / f"{tag}.txt")
        cpu0, gen0, llm0 = gw.cpu(), self_cpu_seconds(), llm.cpu()

        timeout = 30.0 + latency * 2 + sessions * 0.03
        if sessions == 1:
            tab = tabs[0]
            t_start = now()
            for i in range(seq_turns):
                await tab.send(f"hello {tab.chat_id} turn {i}")
                try:
                    await asyncio.wait_for(tab.done.wait(), timeout)
                except TimeoutError:
                    break
            t_end = now()
            turns = [t for t in tab.turns]
            turns += [Turn("(not sent)") for _ in range(seq_turns - len(turns))]
        else:
            t_start = now()
            for tab in tabs:
                await tab.send(f"hello {tab.chat_id}")
            try:
                await asyncio.wait_for(asyncio.gather(*(t.done.wait() for t in tabs)), timeout)
            except TimeoutError:
                pass
            t_end = now()
            turns = [t.turns[0] for t in tabs]
        cpu1, gen1, llm1 = gw.cpu(), self_cpu_seconds(), llm.cpu()
        if spy is not None:
            await stop_spy(spy)
            spy = None
        await asyncio.sleep(0.3)  # anything arriving now would be a duplicate
        hwm = gw.hwm_kb()
        llm_calls = await llm.served() - llm_before

        answered = [t for t in turns if not math.isnan(t.t_final)]
        finals = [t.t_final for t in answered]
        wall = (max(finals) if finals else t_end) - t_start if sessions > 1 else t_end - t_start
        e2e = [t.t_final - t.t_send for t in answered]
        return RunResult(
            latency=latency, sessions=sessions, turns=len(turns), e2e=e2e,
            ack=[t.t_ack - t.t_send for t in turns if not math.isnan(t.t_ack)], wall=wall,
            missing=len(turns) - len(answered),
            duplicates=sum(max(0, len(t.finals) - 1) for t in turns) + sum(tab.stray_finals for tab in tabs),
            wrong=sum(1 for t in answered if any(v != t.expected for v in t.finals.values())),
            within=sum(1 for x in e2e if x <= latency + 2.0),
            gw_cpu=cpu1 - cpu0, gen_cpu=(gen1 - gen0) + (llm1 - llm0), llm_calls=llm_calls,
            idle_rss_kb=idle_rss, hwm_kb=hwm,
            first5=med([t.t_final - t.t_send for t in turns[:5]]) if sessions == 1 else math.nan,
            last5=med([t.t_final - t.t_send for t in turns[-5:]]) if sessions == 1 else math.nan)
    finally:
        if spy is not None:
            await stop_spy(spy)
        await asyncio.gather(*(t.close() for t in tabs), return_exceptions=True)
        await http.close()
        await gw.stop()


# -- profiling (optional) ----------------------------------------------------------------------


async def start_spy(pid: int, out: Path) -> asyncio.subprocess.Process:
    """py-spy record (collapsed stacks) of the gateway while the load runs."""
    spy_bin = Path(sys.executable).with_name("py-spy")
    out.parent.mkdir(parents=True, exist_ok=True)
    proc = await asyncio.create_subprocess_exec(
        str(spy_bin), "record", "--pid", str(pid), "--rate", "100", "--nonblocking", "--format", "raw", "--threads",
        "--output", str(out), stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL)
    await asyncio.sleep(0.5)  # let it attach
    return proc


async def stop_spy(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is None:
        proc.send_signal(signal.SIGINT)
        try:
            await asyncio.wait_for(proc.wait(), 30)
        except TimeoutError:
            proc.kill()
            await proc.wait()


# -- start-up ----------------------------------------------------------------------------------


async def measure_launches(llm_url: str, n: int, placement: Placement, workdir: Path,
                           extra_env: dict[str, str]) -> dict[str, Any]:
    health, ready, rss = [], [], []
    for _ in range(n):
        gw = Gateway(llm_url, placement, workdir, extra_env)
        await gw.start()
        health.append(gw.t_health)
        ready.append(gw.t_ready)
        if gw.rss_at_ready_kb:
            rss.append(gw.rss_at_ready_kb / 1024)
        await gw.stop()
        await asyncio.sleep(0.2)
    return {"health": med(health), "ready": med(ready), "rss": med(rss),
            "health_all": health, "ready_all": ready}


# -- reporting ---------------------------------------------------------------------------------


def fmt_ms(seconds: float) -> str:
    return "-" if math.isnan(seconds) else f"{seconds * 1000:.1f}"


def row_for(results: list[RunResult]) -> dict[str, str]:
    r0 = results[0]
    L = r0.latency
    added_p50 = med([pct(r.e2e, 0.5) - L for r in results])
    added_p99 = med([pct(r.e2e, 0.99) - L for r in results])
    within = min(r.within for r in results)
    mb = lambda kb: "-" if kb is None else f"{kb / 1024:.0f}"  # noqa: E731
    return {
        "L s": f"{L:g}",
        "N": str(r0.sessions),
        "turns": str(r0.turns),
        "turns/s": f"{med([r.rate for r in results]):.1f}",
        "wall s": f"{med([r.wall for r in results]):.2f}",
        "e2e p50 ms": fmt_ms(med([pct(r.e2e, 0.5) for r in results])),
        "e2e p99 ms": fmt_ms(med([pct(r.e2e, 0.99) for r in results])),
        "added p50 ms": fmt_ms(added_p50),
        "added p99 ms": fmt_ms(added_p99),
        "ack p50 ms": fmt_ms(med([pct(r.ack, 0.5) for r in results])),
        "<=L+2s": f"{within}/{r0.turns}",
        "miss/dup/bad": f"{sum(r.missing for r in results)}/{sum(r.duplicates for r in results)}"
                        f"/{sum(r.wrong for r in results)}",
        "LLM calls/turn": f"{med([r.llm_calls / r.turns for r in results]):.2f}",
        "gw CPU ms/turn": f"{med([r.gw_cpu / r.turns * 1000 for r in results]):.2f}",
        "gw CPU %": f"{med([r.gw_cpu / r.wall * 100 for r in results]):.0f}",
        "gen CPU %": f"{med([r.gen_cpu / r.wall * 100 / max(1, len(os.sched_getaffinity(0))) for r in results]):.0f}",
        "idle RSS MB": mb(med([r.idle_rss_kb for r in results if r.idle_rss_kb])),
        "peak RSS MB": mb(med([r.hwm_kb for r in results if r.hwm_kb])),
    }


def table(rows: list[dict[str, str]]) -> str:
    if not rows:
        return "(no scenarios)"
    cols = list(rows[0])
    widths = {c: max(len(c), *(len(r[c]) for r in rows)) for c in cols}
    line = lambda cells: "  ".join(cells[c].rjust(widths[c]) for c in cols)  # noqa: E731
    out = [line({c: c for c in cols}), line({c: "-" * widths[c] for c in cols})]
    out += [line(r) for r in rows]
    return "\n".join(out)


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# -- main --------------------------------------------------------------------------------------


def floats(text: str) -> list[float]:
    return [float(x) for x in text.split(",") if x.strip()]


def ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


async def main_async(args: argparse.Namespace) -> int:
    placement = Placement(args.pin)
    placement.apply_to_self()
    nofile = raise_nofile()
    workdir = Path(tempfile.mkdtemp(prefix="chatgate-bench-"))
    t_begin = now()
    try:
        import subprocess

        rev = subprocess.run(["git", "-C", str(lp.SOURCE), "describe", "--always", "--dirty"], capture_output=True,
                             text=True, timeout=5).stdout.strip() or f"snapshot in {lp.SOURCE}"
    except (OSError, subprocess.SubprocessError):
        rev = "?"
    print(f"chatgate {rev}; gateway_load: python {sys.version.split()[0]}, {os.cpu_count()} CPUs, "
          f"load {os.getloadavg()[0]:.2f}; {placement.describe()}; RLIMIT_NOFILE {nofile} (inherited by the gateway)")
    if args.gateway_env:
        print("extra gateway environment: " + " ".join(f"{k}={v}" for k, v in args.gateway_env.items()))
    print(f"fake LLM in a separate process; every run = fresh gateway + 1 warm-up turn; medians of "
          f"{args.repeat} run(s); N=1 rows are sequential turns in one chat")
    results: dict[tuple[float, int], list[RunResult]] = {}
    launch: dict[str, Any] | None = None
    llms = {L: LLMProcess(L) for L in args.latency}
    try:
        for llm in llms.values():
            await llm.start()
        if args.launches > 0:
            log(f"start-up: {args.launches} launches …")
            launch = await measure_launches(next(iter(llms.values())).base_url, args.launches, placement, workdir,
                                            args.gateway_env)
        for L, llm in llms.items():
            for n in args.sessions:
                seq = args.seq_turns if L <= 0 else max(5, min(args.seq_turns, int(args.seq_budget / L)))
                for rep in range(args.repeat):
                    tag = f"L{L:g}-N{n}-r{rep + 1}"
                    r = await run_scenario(llm, n, seq, placement, workdir, args.profile, tag,
                                           args.gateway_env)
                    results.setdefault((L, n), []).append(r)
                    log(f"  {tag}: wall {r.wall:.2f}s  e2e p50 {fmt_ms(pct(r.e2e, .5))} p99 {fmt_ms(pct(r.e2e, .99))} ms"
                        f"  missing {r.missing} dup {r.duplicates} wrong {r.wrong}  gw cpu {r.gw_cpu:.2f}s"
                        f"  llm calls {r.llm_calls}  hwm {(r.hwm_kb or 0) / 1024:.0f} MB")
    finally:
        for llm in llms.values():
            await llm.stop()
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)

    print()
    if launch is not None:
        print(f"start-up (median of {args.launches}): spawn -> /healthz 200: {launch['health'] * 1000:.0f} ms;"
              f" spawn -> 'chatgate is running': {launch['ready'] * 1000:.0f} ms;"
              f" VmRSS at ready: {launch['rss']:.0f} MB")
        print("  all launches (ms): healthz " + " ".join(f"{x * 1000:.0f}" for x in launch["health_all"])
              + " | ready " + " ".join(f"{x * 1000:.0f}" for x in launch["ready_all"]))
        print()
    rows = [row_for(rs) for rs in results.values()]
    print(table(rows))
    print()
    for rs in results.values():
        if rs[0].sessions == 1 and rs[0].turns >= 10:
            print(f"N=1, L={rs[0].latency:g}: e2e median of turns 1-5 {fmt_ms(med([r.first5 for r in rs]))} ms,"
                  f" of turns {rs[0].turns - 4}-{rs[0].turns} {fmt_ms(med([r.last5 for r in rs]))} ms"
                  f" (one chat: the history sent to the LLM grows by 2 messages a turn)")
    print("added = e2e - L (what the gateway adds to the model's own time); e2e = send -> frame with final:true;"
          " <=L+2s = turns answered within L + 2 s in the worst run; miss/dup/bad summed over runs;"
          " gw CPU % = gateway CPU time / wall time (100 = its core saturated);"
          " gen CPU % = load generator + fake LLM CPU over the burst, as % of the CPUs they may use;"
          " idle RSS = after start + warm-up turn; peak RSS = VmHWM after the scenario.")
    print(f"total bench time {now() - t_begin:.0f} s; load average at the end {os.getloadavg()[0]:.2f}"
          " (anything above ~1 means other work shared these 2 CPUs)")
    if args.json:
        Path(args.json).write_text(json.dumps({
            "launch": launch,
            "runs": [{k: v for k, v in r.__dict__.items()} for rs in results.values() for r in rs],
        }, indent=1))
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sessions", type=ints, default=None, help="concurrent web chats, e.g. 1,100,1000")
    p.add_argument("--latency", type=floats, default=None, help="fake LLM latency in seconds, e.g. 0,1")
    p.add_argument("--repeat", type=int, default=None, help="runs per scenario (median reported); default 3")
    p.add_argument("--launches", type=int, default=None, help="start-up measurements; default 5")
    p.add_argument("--seq-turns", type=int, default=None, help="sequential turns for N=1; default 50")
    p.add_argument("--seq-budget", type=float, default=10.0,
                   help="for N=1 at L>0, at most this many seconds of LLM latency per run (min 5 turns)")
    p.add_argument("--quick", action="store_true", help="a smoke run: N=1,100, L=0, 1 run, 2 launches")
    p.add_argument("--no-pin", dest="pin", action="store_false", help="do not pin processes to CPUs")
    p.add_argument("--profile", type=Path, default=None, metavar="DIR",
                   help="py-spy record the gateway during each burst (collapsed stacks in DIR)")
    p.add_argument("--gateway-env", action="append", default=[], metavar="KEY=VALUE",
                   help="extra environment for the gateway (e.g. CHATGATE_LLM__MODEL=x); repeatable")
    p.add_argument("--source", type=Path, default=None, metavar="DIR",
                   help="run the gateway from this checkout (e.g. a `git archive HEAD` snapshot) instead of this repo")
    p.add_argument("--keep", action="store_true", help="keep the gateways' temporary homes (logs, state.db)")
    p.add_argument("--json", default=None, metavar="FILE", help="also write raw results as JSON")
    p.add_argument("--serve-llm", type=float, default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.serve_llm is not None:
        asyncio.run(serve_llm(args.serve_llm))
        return 0
    quick = args.quick
    if args.source is not None:
        lp.SOURCE = args.source.resolve()
    args.gateway_env = dict(kv.split("=", 1) for kv in args.gateway_env)
    args.sessions = args.sessions or ([1, 100] if quick else [1, 100, 1000])
    args.latency = args.latency or ([0.0] if quick else [0.0, 1.0])
    args.repeat = args.repeat or (1 if quick else 3)
    args.launches = args.launches if args.launches is not None else (2 if quick else 5)
    args.seq_turns = args.seq_turns or (10 if quick else 50)
    return asyncio.run(main_async(args))


if __name__ == "__main__":
    sys.exit(main())
