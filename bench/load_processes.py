"""The processes of bench/gateway_load.py (and bench/cron_bench.py): the fake LLM in a process of its own, a
`chatgate run` with a fresh home and port, where each runs (CPU placement), and what /proc says of them."""

from __future__ import annotations

import asyncio
import math
import os
import resource
import secrets
import signal
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

SOURCE = ROOT  # where the gateway under test is imported from (gateway_load.py --source)
CLK_TCK = os.sysconf("SC_CLK_TCK")
now = time.perf_counter


# -- small helpers ----------------------------------------------------------------------------


WEBCHAT_TOKEN = "bench-" + secrets.token_hex(8)  # the web chat needs one, on loopback too


def pct(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..1); NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def med(values: list[float]) -> float:
    values = [v for v in values if not math.isnan(v)]
    return statistics.median(values) if values else math.nan


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def proc_status_kb(pid: int, field_name: str) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field_name + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def proc_cpu_seconds(pid: int) -> float:
    """utime + stime of a whole process (all threads), in seconds."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLK_TCK
    except OSError:
        return math.nan


def self_cpu_seconds() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def raise_nofile(want: int = 65536) -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = want if hard == resource.RLIM_INFINITY else min(want, hard)
    if soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def clean_env() -> dict[str, str]:
    """The parent's environment without anything that configures chatgate or an LLM."""
    drop = ("CHATGATE_", "OPENAI_", "TELEGRAM_", "DISCORD_", "SLACK_")
    return {k: v for k, v in os.environ.items() if not k.startswith(drop)}


class Placement:
    """CPU pinning: the gateway gets CPU `gateway_cpus`, this process and the fake LLM the rest."""

    def __init__(self, pin: bool) -> None:
        cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
        self.enabled = pin and len(cpus) >= 2
        self.gateway_cpus = {cpus[0]} if self.enabled else set(cpus)
        self.client_cpus = set(cpus[1:]) if self.enabled else set(cpus)

    def apply_to_self(self) -> None:
        if self.enabled:
            os.sched_setaffinity(0, self.client_cpus)

    def gateway_preexec(self):  # runs in the child between fork and exec
        if not self.enabled:
            return None
        cpus = self.gateway_cpus
        return lambda: os.sched_setaffinity(0, cpus)

    def describe(self) -> str:
        if not self.enabled:
            return "not pinned (kernel decides)"
        fmt = lambda s: ",".join(map(str, sorted(s)))  # noqa: E731
        return f"gateway on CPU {fmt(self.gateway_cpus)}; load generator + fake LLM on CPU {fmt(self.client_cpus)}"


# -- the fake LLM in its own process -----------------------------------------------------------


async def serve_llm(latency: float) -> None:
    """Child mode: run FakeLLM; stdin lines 'count' -> print requests served; EOF -> exit."""
    from tests.fakes.llm import FakeLLM

    llm = FakeLLM(latency=latency)
    await llm.start()
    served = 0
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    print(llm.base_url, flush=True)
    try:
        while True:
            line = await reader.readline()
            if not line:
                break
            served += len(llm.requests)
            llm.requests.clear()  # keep memory flat over a long run; we only need the count
            if line.strip() == b"count":
                print(served, flush=True)
    finally:
        await llm.stop()


class LLMProcess:
    def __init__(self, latency: float) -> None:
        self.latency = latency
        self.proc: asyncio.subprocess.Process | None = None
        self.base_url = ""

    async def start(self) -> None:
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable, str(Path(__file__).resolve().with_name("gateway_load.py")), "--serve-llm",
            str(self.latency),
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, cwd=str(ROOT))
        assert self.proc.stdout is not None
        line = await asyncio.wait_for(self.proc.stdout.readline(), 30)
        if not line.startswith(b"http://127.0.0.1:"):
            raise RuntimeError(f"fake LLM did not start: {line!r}")
        self.base_url = line.decode().strip()

    async def served(self) -> int:
        assert self.proc is not None and self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(b"count\n")
        await self.proc.stdin.drain()
        return int(await asyncio.wait_for(self.proc.stdout.readline(), 10))

    def cpu(self) -> float:
        return proc_cpu_seconds(self.proc.pid) if self.proc else math.nan

    async def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            await asyncio.wait_for(self.proc.wait(), 10)
        except TimeoutError:
            self.proc.kill()
            await self.proc.wait()


# -- the gateway under test --------------------------------------------------------------------


async def healthz_ok(port: int) -> bool:
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError:
        return False
    try:
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        status = await asyncio.wait_for(reader.readline(), 5)
        return status.split(b" ")[1:2] == [b"200"]
    except (OSError, TimeoutError, IndexError):
        return False
    finally:
        writer.close()


class Gateway:
    """One `chatgate run` subprocess with a fresh home and port."""

    def __init__(self, llm_url: str, placement: Placement, workdir: Path,
                 extra_env: dict[str, str] | None = None) -> None:
        self.llm_url = llm_url
        self.extra_env = extra_env or {}
        self.placement = placement
        self.home = Path(tempfile.mkdtemp(prefix="gw-", dir=workdir))
        self.port = free_port()
        self.proc: asyncio.subprocess.Process | None = None
        self.t_health = math.nan  # seconds from spawn
        self.t_ready = math.nan
        self.rss_at_ready_kb: int | None = None
        self._stdout_task: asyncio.Task[None] | None = None

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    async def start(self, timeout: float = 30.0) -> None:
        env = clean_env()
        env.update({
            "CHATGATE_HOME": str(self.home),
            "CHATGATE_LLM__BASE_URL": self.llm_url,
            "CHATGATE_LLM__API_KEY": "bench-key",
            "CHATGATE_HTTP__HOST": "127.0.0.1",
            "CHATGATE_HTTP__PORT": str(self.port),
            "CHATGATE_PLATFORMS__WEBCHAT__TOKEN": WEBCHAT_TOKEN,
            "CHATGATE_GATEWAY__LOG_LEVEL": "WARNING",
            "CHATGATE_GATEWAY__DRAIN_SECONDS": "2",
        })
        if SOURCE != ROOT:  # a snapshot elsewhere: import chatgate from there, not from the editable install
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(SOURCE), env.get("PYTHONPATH")]))
        env.update(self.extra_env)
        self._stderr = open(self.home / "stderr.log", "wb")
        t0 = now()
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "gateway", "run", cwd=str(SOURCE), env=env,
            stdout=asyncio.subprocess.PIPE, stderr=self._stderr, stdin=asyncio.subprocess.DEVNULL,
            preexec_fn=self.placement.gateway_preexec())
        ready = asyncio.get_running_loop().create_future()

        async def read_stdout() -> None:
            assert self.proc is not None and self.proc.stdout is not None
            async for line in self.proc.stdout:
                if b"chatgate is running" in line and not ready.done():
                    self.t_ready = now() - t0
                    self.rss_at_ready_kb = proc_status_kb(self.pid, "VmRSS")
                    ready.set_result(None)
            if not ready.done():
                ready.set_exception(RuntimeError("gateway exited before it was ready: " + self.stderr_tail()))

        async def poll_health() -> None:
            while not await healthz_ok(self.port):
                if self.proc is not None and self.proc.returncode is not None:
                    return
                await asyncio.sleep(0.005)
            self.t_health = now() - t0

        async def watch_stderr() -> None:  # a traceback at start-up: fail now, not at the timeout
            while not ready.done():
                await asyncio.sleep(0.1)
                if "Traceback (most recent call last)" in self.stderr_tail(100_000) and not ready.done():
                    await asyncio.sleep(0.3)  # let the rest of it be written
                    ready.set_exception(RuntimeError("gateway failed to start:\n" + self.stderr_tail()))

        self._stdout_task = asyncio.create_task(read_stdout())
        watcher = asyncio.create_task(watch_stderr())
        try:
            await asyncio.wait_for(asyncio.gather(ready, poll_health()), timeout)
        except TimeoutError:
            await self.stop()
            raise RuntimeError(f"gateway not ready within {timeout:.0f}s; stderr:\n{self.stderr_tail()}") from None
        except BaseException:
            await self.stop()
            raise
        finally:
            watcher.cancel()

    def stderr_tail(self, n: int = 2000) -> str:
        try:
            return (self.home / "stderr.log").read_text(errors="replace")[-n:]
        except OSError:
            return ""

    def rss_kb(self) -> int | None:
        return proc_status_kb(self.pid, "VmRSS")

    def hwm_kb(self) -> int | None:
        return proc_status_kb(self.pid, "VmHWM")

    def cpu(self) -> float:
        return proc_cpu_seconds(self.pid)

    async def settle(self, quiet: float = 0.02, window: float = 0.2, limit: float = 10.0) -> None:
        """Wait until the gateway uses < `quiet` s of CPU per `window` (background work done)."""
        deadline = now() + limit
        last = self.cpu()
        while now() < deadline:
            await asyncio.sleep(window)
            cur = self.cpu()
            if cur - last < quiet:
                return
            last = cur

    async def stop(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(self.proc.wait(), 15)
            except TimeoutError:
                self.proc.kill()
                await self.proc.wait()
        if self._stdout_task is not None:
            await asyncio.gather(self._stdout_task, return_exceptions=True)
        self._stderr.close()
