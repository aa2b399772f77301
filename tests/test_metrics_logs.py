"""What an operator watches: /metrics after real traffic, and JSON log lines."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import aiohttp

from gateway.ops.logs import setup_logging
from gateway.ops.metrics import version
from tests.board_model import BoardModel
from tests.fakes.llm import FakeLLM, Reply
from tests.harness import Tab, eventually, free_port, gateway_env, start_gateway


def sample(metrics: str, name: str, labels: str = "") -> float:
    match = re.search(rf"^{re.escape(name)}{re.escape(labels)} (\S+)$", metrics, re.M)
    assert match, f"{name}{labels} is not in /metrics"
    return float(match.group(1))


async def test_metrics_count_traffic_llm_latency_tokens_queues_and_cron_lateness(tmp_path, llm: FakeLLM):
    runner = await start_gateway(tmp_path, llm.base_url)
    url = f"http://127.0.0.1:{runner.http.port}/metrics"
    try:
        async with Tab(runner) as tab:
            await tab.say("hello")
            assert await tab.reply() == "echo: hello"
            job = await runner.parts.jobs.create(name="tick", prompt="ping", schedule="in 1s", target="none",
                                           owner_platform="cli", owner_id="op")
            runner.parts.cron_timers.changed()
            await eventually(lambda: len(llm.requests) == 2, 10, "the job's run")

            async def metrics() -> str:
                async with aiohttp.ClientSession() as http, http.get(url) as response:
                    return await response.text()

            text = await metrics()
            assert job.name == "tick"
        assert sample(text, "chatgate_inbound_messages_total", '{platform="webchat"}') == 1
        assert sample(text, "chatgate_outbound_messages_total", '{platform="webchat"}') == 1
        assert sample(text, "chatgate_llm_request_seconds_count") == 2
        assert sample(text, "chatgate_llm_tokens_total", '{kind="prompt",loop="main"}') > 0
        assert sample(text, "chatgate_llm_tokens_total", '{kind="completion",loop="main"}') > 0
        assert sample(text, "chatgate_waiting_messages", '{busy_policy="queue"}') == 0
        assert sample(text, "chatgate_outbox_replies", '{state="pending"}') == 0
        assert sample(text, "chatgate_outbox_replies", '{state="failed"}') == 0
        assert sample(text, "chatgate_approvals_pending") == 0
        assert sample(text, "chatgate_cron_lateness_seconds_count") == 1
    finally:
        await runner.stop()


async def test_the_board_s_tasks_by_status_are_read_at_each_scrape_zeros_included(tmp_path, llm: FakeLLM):
    model = BoardModel()
    llm.responder = model
    let_go = asyncio.Event()
    model.plans["working"] = lambda turn, text, body: Reply.text("working on it", hold=let_go)  # (holds its slot)
    runner = await start_gateway(tmp_path, llm.base_url, board__max_running="1", review__enabled="false")
    url = f"http://127.0.0.1:{runner.http.port}/metrics"
    board = runner.parts.store.board

    async def scraped() -> dict[str, float]:
        async with aiohttp.ClientSession() as http, http.get(url) as response:
            text = await response.text()
        assert len(re.findall(r"^chatgate_board_tasks\{", text, re.M)) == 6, text  # one sample a status, no more
        return {s: sample(text, "chatgate_board_tasks", f'{{status="{s}"}}')
                for s in ("todo", "ready", "running", "blocked", "done", "archived")}

    async def status_is(task_id: int, status: str) -> bool:
        return (await board.get(task_id)).status == status
    try:
        assert await scraped() == dict.fromkeys(("todo", "ready", "running", "blocked", "done", "archived"), 0)
        quick = await board.add("quick")
        await eventually(lambda: status_is(quick.id, "done"), 20, "the quick task done")
        working = await board.add("working")
        await eventually(lambda: status_is(working.id, "running"), 20, "the held task running")
        ask = await board.add("ask")  # (no slot free: it stays ready until blocked here)
        await board.block(ask.id, None, "which one?", None, None, author="operator")
        for n in range(2):
            await board.add(f"after {n}", parents=[ask.id])
        for n in range(3):
            await board.add(f"waiting {n}")
        await board.cancel((await board.add("dropped")).id, "operator")
        assert await scraped() == {"todo": 2, "ready": 3, "running": 1, "blocked": 1, "done": 1, "archived": 1}
    finally:
        let_go.set()
        await runner.stop()


def test_json_logs_are_one_redacted_object_a_line(capsys):
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    try:
        setup_logging("INFO", ["s3cret-value-123"], "json")
        log = logging.getLogger("chatgate.test")
        log.info('said "hi" with s3cret-value-123')
        try:
            raise ValueError("token=s3cret-value-123 refused")
        except ValueError:
            log.exception("it failed")
        lines = capsys.readouterr().err.strip().splitlines()
        first, second = (json.loads(line) for line in lines)
        assert first["level"] == "INFO" and first["logger"] == "chatgate.test"
        assert first["message"] == 'said "hi" with ***'
        assert second["message"] == "it failed" and "ValueError" in second["exception"]
        assert "s3cret" not in "\n".join(lines)
    finally:
        root.handlers[:], level = saved
        root.setLevel(level)


async def test_metrics_have_the_process_collectors_the_build_and_each_platform_up(tmp_path, llm: FakeLLM):
    runner = await start_gateway(tmp_path, llm.base_url)
    try:
        async with aiohttp.ClientSession() as http, \
                http.get(f"http://127.0.0.1:{runner.http.port}/metrics") as response:
            text = await response.text()
        assert sample(text, "process_cpu_seconds_total") > 0 and sample(text, "process_resident_memory_bytes") > 0
        assert sample(text, "process_open_fds") > 0
        assert re.search(r'^python_info\{.*version="\d+\.\d+\.\d+"\} 1\.0$', text, re.M)
        assert sample(text, "python_gc_objects_collected_total", '{generation="0"}') >= 0
        assert sample(text, "chatgate_build_info", f'{{version="{version()}"}}') == 1 and version() != "unknown"
        assert sample(text, "chatgate_platform_up", '{platform="webchat"}') == 1
    finally:
        await runner.stop()


async def test_a_turns_log_lines_say_where_and_llm_failures_and_retries_are_counted(tmp_path, llm: FakeLLM,
                                                                                    capsys):
    llm.script(*[Reply.error(500, message="overloaded")] * 3)  # the SDK tries 3 times (llm.max_retries 2)
    runner = await start_gateway(tmp_path, llm.base_url)
    setup_logging("INFO", runner.config.secrets(), "json")
    try:
        async with Tab(runner) as tab:
            await tab.say("hello")
            assert (await tab.reply()).startswith("The language model service failed (HTTP 500)")
        logging.getLogger("chatgate.test").warning("not about a turn")
        async with aiohttp.ClientSession() as http, \
                http.get(f"http://127.0.0.1:{runner.http.port}/metrics") as response:
            text = await response.text()
    finally:
        await runner.stop()
    with sqlite3.connect(tmp_path / "state.db") as db:
        [(inbox_id,)] = db.execute("SELECT id FROM inbox").fetchall()
    entries = [json.loads(line) for line in capsys.readouterr().err.splitlines() if line.startswith("{")]
    [failed] = [e for e in entries if e["message"].startswith("turn in ")]
    assert failed["level"] == "WARNING" and failed["platform"] == "webchat" and failed["chat"] == tab.chat_id
    assert failed["turn"] == inbox_id and isinstance(failed["session"], int)
    [outside] = [e for e in entries if e["message"] == "not about a turn"]
    assert not {"platform", "chat", "session", "turn"} & outside.keys()
    assert sample(text, "chatgate_llm_errors_total", '{kind="server"}') == 1
    assert sample(text, "chatgate_llm_retries_total", '{kind="server"}') == 2


async def _run_logging_to(stderr_file: Path, home: Path, llm: FakeLLM, journal_stream: str) -> list[str]:
    """`chatgate run` (Telegram unreachable, the web chat on) with its stderr in `stderr_file` and
    `JOURNAL_STREAM` set as given, until it is ready; then stopped. Its stderr's lines."""
    env = {**os.environ, **gateway_env(home, llm.base_url, platforms__telegram__token="123:ABC",
                                       platforms__telegram__base_url=f"http://127.0.0.1:{free_port()}",
                                       platforms__webchat__enabled="true"), "JOURNAL_STREAM": journal_stream}
    with open(stderr_file, "wb") as stderr:
        process = subprocess.Popen([sys.executable, "-m", "gateway", "run"], env=env, stdout=subprocess.DEVNULL,
                                   stderr=stderr)
    try:
        await eventually(lambda: "chatgate ready" in stderr_file.read_text(), 30, "the daemon ready")
    finally:
        process.send_signal(signal.SIGTERM)
        assert await asyncio.to_thread(process.wait, 30) == 0
    return stderr_file.read_text().splitlines()


async def test_log_lines_start_with_their_priority_when_stderr_is_the_journal(tmp_path, llm: FakeLLM):
    journal = tmp_path / "journal"
    journal.touch()
    found = os.stat(journal)
    lines = await _run_logging_to(journal, tmp_path / "a", llm, f"{found.st_dev}:{found.st_ino}")
    assert lines and all(re.match(r"<[2-7]>(DEBUG|INFO|WARNING|ERROR|CRITICAL) ", line) for line in lines), lines
    assert any(line.startswith("<4>WARNING gateway.connections: telegram cannot connect:") for line in lines), lines
    assert any(line.startswith("<6>INFO gateway.runner: chatgate ready on") for line in lines), lines

    elsewhere = tmp_path / "a file, not the journal"  # JOURNAL_STREAM inherited, but stderr is not that stream
    lines = await _run_logging_to(elsewhere, tmp_path / "b", llm, f"{found.st_dev}:{found.st_ino}")
    assert lines and not any(line.startswith("<") for line in lines), lines
    assert any(re.match(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} WARNING gateway.connections: telegram cannot connect",
                        line) for line in lines), lines
