#!/usr/bin/env python3
"""Several instances on PostgreSQL against one SQLite daemon, on the shared harness's fakes and driver.

Four set-ups run side by side, each with its own fake Telegram and fake LLM (../shared/bench) and a fresh state:
`sqlite` (one daemon, the default storage), `pg1` (one daemon on a fresh PostgreSQL database), `pg2` (two
daemons on one fresh database: the one that holds Telegram's long poll runs the conversations, the other stands
by) and `pg2w` (two daemons behind the webhook: the shared fake drives no webhooks, so a relay here plays
Telegram and a round-robin load balancer — it long-polls the fake and posts each update to the two daemons in
turn, with the webhook's secret). Rounds alternate the set-ups (the machine is shared and noisy); each round
drives scenario A (1 chat x 50 messages, model at once) and C (500 chats x 2 messages = 1,000 answers, model 1 s)
on each. It prints the medians per set-up: reply p50, CPU per turn (the daemons' — both in pg2 — and
PostgreSQL's, from /proc), C's wall time, and missing or doubled replies. It asserts nothing.

    .venv/bin/python bench/instances_pg.py [--rounds 3] [--url postgresql://postgres@127.0.0.1:5432/postgres]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
BENCH = Path(os.environ.get("CHATGATE_SHARED_BENCH", HERE.parent / "shared" / "bench"))
PY = sys.executable
SETUPS = ("sqlite", "pg1", "pg2", "pg2w")
SECRET = "bench-webhook-secret"
TICK = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cpu_seconds(pids: list[int]) -> float:
    total = 0.0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / TICK
    return total


def postgres_pids() -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "comm").read_text().strip() in ("postgres", "postmaster"):
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


async def new_database(admin_url: str) -> str:
    import asyncpg

    name = f"bench_{secrets.token_hex(6)}"
    conn = await asyncpg.connect(admin_url)
    try:
        await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()
    return admin_url.rsplit("/", 1)[0] + f"/{name}"


async def drop_database(admin_url: str, url: str) -> None:
    import asyncpg

    conn = await asyncpg.connect(admin_url)
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{url.rsplit("/", 1)[1]}" WITH (FORCE)')
    finally:
        await conn.close()


class SetUp:
    """One set-up's fakes and daemons."""

    def __init__(self, name: str, work: Path, url: str | None) -> None:
        self.name, self.work, self.url = name, work / name, url
        self.work.mkdir()
        self.processes: list[subprocess.Popen[bytes]] = []
        self.tg, self.llm = free_port(), free_port()
        self.daemons: list[subprocess.Popen[bytes]] = []

    def start(self) -> None:
        for script, port, extra in (("fake_telegram_server.py", self.tg, []),
                                    ("fake_llm_server.py", self.llm, ["--latency", "1.0"])):
            log = open(self.work / f"{script}.log", "wb")  # noqa: SIM115 - the child owns it
            self.processes.append(subprocess.Popen([PY, script, "--port", str(port), *extra], cwd=BENCH,
                                                   stdout=log, stderr=subprocess.STDOUT))
        time.sleep(1.5)
        self.ports = [free_port() for _ in range(1 if self.name in ("sqlite", "pg1") else 2)]
        for index in range(len(self.ports)):
            self.daemons.append(self._daemon(index))
            self._wait_ready(index)
        if self.name == "pg2w":
            log = open(self.work / "relay.log", "wb")  # noqa: SIM115 - the child owns it
            self.processes.append(subprocess.Popen([PY, __file__, "relay", str(self.tg), *map(str, self.ports)],
                                                   stdout=log, stderr=subprocess.STDOUT))

    def _daemon(self, index: int) -> subprocess.Popen[bytes]:
        home = self.work / f"home{index}"
        home.mkdir(mode=0o700)
        storage = f"storage:\n  url: {self.url}\n" if self.url else ""
        webhook = (f"    mode: webhook\n    webhook_url: http://127.0.0.1:{self.ports[index]}/telegram/webhook\n"
                   f"    webhook_secret: {SECRET}\n") if self.name == "pg2w" else ""
        (home / "config.yaml").write_text(
            f"llm:\n  base_url: http://127.0.0.1:{self.llm}/v1\n  api_key: sk-bench\n  model: bench-model\n"
            f"platforms:\n  telegram:\n    token: \"123:abc\"\n    base_url: http://127.0.0.1:{self.tg}\n{webhook}"
            f"access:\n  dm_policy: open\nhttp:\n  port: {self.ports[index]}\n{storage}")
        log = open(home / "gateway.log", "wb")  # noqa: SIM115 - the child owns it
        process = subprocess.Popen([PY, "-m", "gateway", "run"], env={**os.environ, "CHATGATE_HOME": str(home)},
                                   stdout=log, stderr=subprocess.STDOUT)
        self.processes.append(process)
        return process

    def _wait_ready(self, index: int) -> None:
        log = self.work / f"home{index}" / "gateway.log"
        deadline = time.monotonic() + 60
        while "chatgate ready" not in log.read_text(errors="replace"):
            if time.monotonic() > deadline:
                raise SystemExit(f"{self.name}: daemon {index} did not start; see {log}")
            time.sleep(0.2)

    def drive(self, label: str, args: list[str]) -> dict:
        out = self.work / f"{label}.jsonl"
        others = [d.pid for d in self.daemons[1:]]
        pg = postgres_pids() if self.url else []
        before = cpu_seconds(others), cpu_seconds(pg)
        subprocess.run([PY, "drive.py", "--tg", f"http://127.0.0.1:{self.tg}", "--llm",
                        f"http://127.0.0.1:{self.llm}", "--gateway-pid", str(self.daemons[0].pid), "--quiet",
                        "--label", label, "--json-out", str(out), *args], cwd=BENCH, check=True,
                       stdout=subprocess.DEVNULL)
        result = json.loads(out.read_text().splitlines()[-1])
        result["others_cpu_s"] = cpu_seconds(others) - before[0]
        result["postgres_cpu_s"] = cpu_seconds(pg) - before[1]
        return result

    def stop(self) -> None:
        for process in reversed(self.processes):
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in self.processes:
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()


def report(results: dict[str, dict[str, list[dict]]]) -> None:
    def med(values: list[float]) -> str:
        return f"{statistics.median(values):.2f}" if values else "-"

    print(f"{'set-up':<8} {'A p50 ms':>9} {'A CPU/turn ms':>14} {'A PG CPU/turn ms':>17} {'C wall s':>9}"
          f" {'C CPU/answer ms':>16} {'C PG CPU/answer ms':>19} {'lost/doubled':>13}")
    for name, runs in results.items():
        a, c = runs["A"], runs["C"]
        per = lambda r, key: r[key] / max(r["completed"], 1) * 1000  # noqa: E731
        own = lambda r: ((r["gateway"] or {}).get("cpu_s", 0.0) + r["others_cpu_s"]) / max(r["completed"], 1) * 1000  # noqa: E731
        bad = sum(r["missing"] + r["duplicates"] for r in a + c)
        print(f"{name:<8} {med([r['latency_s']['done']['p50'] * 1000 for r in a]):>9} {med([own(r) for r in a]):>14}"
              f" {med([per(r, 'postgres_cpu_s') for r in a]):>17} {med([r['wall_s'] for r in c]):>9}"
              f" {med([own(r) for r in c]):>16} {med([per(r, 'postgres_cpu_s') for r in c]):>19} {bad:>13}")


async def relay(tg: int, ports: list[int]) -> None:
    """Telegram's webhook delivery and a round-robin load balancer in one: take the updates off the fake (after
    deleting the webhook the daemons set, which makes it refuse long polls) and post each to the next daemon."""
    import aiohttp

    base = f"http://127.0.0.1:{tg}/bot123:abc"
    async with aiohttp.ClientSession() as http:
        await (await http.post(f"{base}/deleteWebhook", json={})).read()
        offset, turn = 0, 0
        connections = asyncio.Semaphore(40)  # (Telegram's default max_connections)
        pending: set[asyncio.Future[None]] = set()

        async def deliver(update: dict, port: int) -> None:
            async with connections, http.post(f"http://127.0.0.1:{port}/telegram/webhook", json=update,
                                              headers={"X-Telegram-Bot-Api-Secret-Token": SECRET}) as delivered:
                if delivered.status != 200:
                    print(f"update {update['update_id']}: port {port} answered {delivered.status}", flush=True)
        while True:
            async with http.post(f"{base}/getUpdates", json={"offset": offset, "timeout": 1}) as response:
                updates = (await response.json()).get("result") or []
            for update in updates:
                offset = update["update_id"] + 1
                task = asyncio.ensure_future(deliver(update, ports[turn % len(ports)]))
                pending.add(task)
                task.add_done_callback(pending.discard)
                turn += 1


def main() -> None:
    if sys.argv[1:2] == ["relay"]:
        asyncio.run(relay(int(sys.argv[2]), [int(p) for p in sys.argv[3:]]))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--url", default="postgresql://postgres@127.0.0.1:5432/postgres",
                        help="a PostgreSQL database whose role may create databases")
    parser.add_argument("--setups", default=",".join(SETUPS))
    options = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="chatgate-instances-"))
    names = [s for s in options.setups.split(",") if s]
    results: dict[str, dict[str, list[dict]]] = {n: {"A": [], "C": []} for n in names}
    try:
        for round_ in range(options.rounds):
            (work / f"r{round_}").mkdir()
            for name in names:
                url = asyncio.run(new_database(options.url)) if name != "sqlite" else None
                setup = SetUp(name, work / f"r{round_}", url)
                try:
                    setup.start()
                    setup.drive("warm", ["--chats", "50", "--msgs-per-chat", "1", "--warmup", "3"])
                    results[name]["A"].append(setup.drive("A", ["--chats", "1", "--msgs-per-chat", "50", "--warmup",
                                                                "2", "--llm-latency", "0", "--chat-base", "300000"]))
                    results[name]["C"].append(setup.drive("C", ["--chats", "500", "--msgs-per-chat", "2",
                                                                "--llm-latency", "1.0", "--chat-base", "400000"]))
                finally:
                    setup.stop()
                    if url is not None:
                        asyncio.run(drop_database(options.url, url))
                print(f"round {round_ + 1} {name}: done", file=sys.stderr)
        print(f"load average: {' '.join(Path('/proc/loadavg').read_text().split()[:3])}; {options.rounds} rounds")
        report(results)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
