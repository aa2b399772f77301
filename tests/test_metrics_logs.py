"""What an operator watches: /metrics after real traffic, and JSON log lines."""

from __future__ import annotations

import json
import logging
import re

import aiohttp

from gateway.ops.logs import setup_logging
from gateway.ops.metrics import version
from tests.fakes.llm import FakeLLM
from tests.harness import Tab, eventually, start_gateway


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
            job = await runner.jobs.create(name="tick", prompt="ping", schedule="in 1s", target="none",
                                           owner_platform="cli", owner_id="op")
            runner._jobs_changed()
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

