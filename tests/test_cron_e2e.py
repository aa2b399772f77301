"""Scheduled jobs end to end: timers, the ledger, missed runs, restarts, delivery to the chat.

Fast tick (0.2 s) and short schedules; the gateway, the fake LLM and the chats are real
servers over loopback.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, AsyncIterator

import pytest

from gateway import cli
from gateway.cron.jobs import CronError, CronJobs, Job
from gateway.cron.ledger import RunLedger, new_instance_id
from gateway.runner import GatewayRunner
from gateway.storage import Store
from tests.fakes.llm import FakeLLM, Reply
from tests.fakes.telegram import FakeTelegram
from tests.harness import Tab, eventually, gateway_env, is_prompt, press, start_gateway
from tests.instances import shared_database  # noqa: F401  (a fixture)
from tests.pg import pg_url  # noqa: F401  (a fixture)

FAST = {"gateway__tick_seconds": "0.2", "cron__min_interval_seconds": "1"}
ANN = 1001
FORUM = -1001234567890


@asynccontextmanager
async def cron_gateway(home: Path, llm: FakeLLM | None, **more: Any) -> AsyncIterator[GatewayRunner]:
    runner = await start_gateway(home, llm.base_url if llm else None, **{**FAST, **more})
    try:
        yield runner
    finally:
        await runner.stop()


async def runs(runner: GatewayRunner, job_id: int | None = None) -> list[dict[str, Any]]:
    assert runner.parts is not None
    return list(reversed(await runner.parts.store.cron.runs(job_id, limit=200)))


async def wait_runs(runner: GatewayRunner, count: int, *, states: tuple[str, ...] = ("ok",),
                    timeout: float = 10.0) -> list[dict[str, Any]]:
    """Wait until `count` ledger rows are in one of `states`; return them, oldest first."""
    deadline = time.monotonic() + timeout
    while True:
        found = [r for r in await runs(runner) if r["state"] in states]
        if len(found) >= count:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"{len(found)} of {count} runs in {states}; ledger: {await runs(runner)}")
        await asyncio.sleep(0.05)


async def add_job(runner: GatewayRunner, schedule: str, target: str, *, name: str = "job",
                  prompt: str = "say hi", **more: Any) -> Job:
    """A job as `chatgate cron add` or the agent would make it, noticed by the running scheduler."""
    job = await runner.parts.jobs.create(name=name, prompt=prompt, schedule=schedule, target=target,
                                   owner_platform="webchat", owner_id="local", **more)
    runner.parts.cron_timers.changed()
    return job


@asynccontextmanager
async def offline_jobs(home: Path) -> AsyncIterator[CronJobs]:
    store = await Store.open(home / "state.db")
    try:
        yield CronJobs(store.cron, min_interval=1)
    finally:
        await store.close()


# -- firing on time, in the right place ------------------------------------------------------


async def test_one_shot_fires_on_time_in_the_telegram_topic_it_names(tmp_path, llm: FakeLLM, tg: FakeTelegram):
    async with cron_gateway(tmp_path, llm, platforms__telegram__token=tg.token,
                            platforms__telegram__base_url=tg.url, platforms__telegram__poll_timeout=1,
                            access__allowed_users=f"{{telegram: [{ANN}]}}",
                            gateway__tick_seconds="30") as runner:  # a slow tick: the job's own timer must fire it
        job = await add_job(runner, "in 2s", f"telegram:{FORUM}:77", name="tea", prompt="tea is ready")
        [run] = await wait_runs(runner, 1, timeout=6)
        assert runner.parts.tick.count == 1  # only the start's round ran: the job's own timer fired it
        assert run["started_at"] >= run["scheduled_at"] == job.next_run_at  # not early (lateness: bench/)
        await tg.wait_for("sendMessage")
        [message] = tg.sent_messages(FORUM)
        assert message.message_thread_id == 77
        assert message.text == "⏰ tea\n\necho: tea is ready"


        async def recorded() -> bool:  # the delivery records the id once Telegram has answered
            [run] = await runs(runner)
            return run["platform_message_ids"] == f'["{message.message_id}"]'

        await eventually(recorded, what="the ledger knows what was sent")


async def test_every_repeats_on_exact_slots_into_the_web_chat(tmp_path, llm: FakeLLM):
    async with cron_gateway(tmp_path, llm) as runner:
        async with Tab(runner) as tab:
            await add_job(runner, "every 1s", f"webchat:{tab.chat_id}", name="pulse", prompt="beat")
            done = await wait_runs(runner, 3)
            slots = [r["scheduled_at"] for r in done[:3]]
            assert [round(b - a, 3) for a, b in zip(slots, slots[1:])] == [1.0, 1.0]
            await tab.reply(3)
            assert tab.replies()[:3] == ["⏰ pulse\n\necho: beat"] * 3


async def test_a_job_that_names_a_model_runs_on_it_and_counts_as_cron(tmp_path, llm: FakeLLM):
    async with cron_gateway(tmp_path, llm) as runner:
        async with Tab(runner) as tab:
            job = await add_job(runner, "in 1s", f"webchat:{tab.chat_id}", name="digest", prompt="sum up",
                                model="big-model")
            assert "model big-model" in job.describe()
            await tab.reply()
            assert tab.replies() == ["⏰ digest\n\necho: sum up"]
        assert llm.requests[-1]["model"] == "big-model"
        rows = await runner.parts.store.fetch("SELECT loop, model FROM llm_usage")
        assert [(r["loop"], r["model"]) for r in rows] == [("cron", "big-model")]
        with pytest.raises(CronError, match="a model is a name"):
            await runner.parts.jobs.update(job.id, model="two words")
        assert (await runner.parts.jobs.update(job.id, model="")).model is None  # back to the main model


async def test_silent_reply_delivers_nothing(tmp_path, llm: FakeLLM):
    llm.script(Reply.text("[SILENT]"))
    async with cron_gateway(tmp_path, llm) as runner:
        async with Tab(runner) as tab:
            await add_job(runner, "in 1s", f"webchat:{tab.chat_id}")
            [run] = await wait_runs(runner, 1, states=("silent",))
            assert run["outbox_id"] is None and run["output"] == "[SILENT]"
            await tab.say("still there?")
            assert await tab.reply() == "echo: still there?"  # the only message this chat got
            assert len(tab.replies()) == 1


async def test_a_failing_run_sends_an_error_notice(tmp_path, llm: FakeLLM):
    llm.script(*[Reply.error(500, message="model exploded")] * 3)
    async with cron_gateway(tmp_path, llm) as runner:
        async with Tab(runner) as tab:
            job = await add_job(runner, "in 1s", f"webchat:{tab.chat_id}", name="report")
            [run] = await wait_runs(runner, 1, states=("error",))
            notice = await tab.reply()
            assert notice.startswith(f'⚠️ Scheduled job #{job.id} "report" failed:')
            assert run["error"] and run["error"] in notice
            assert (await runner.parts.jobs.get(job.id)).last_status == "error"


async def test_dangerous_command_in_a_run_is_refused_without_a_person(tmp_path, llm: FakeLLM):
    ws = tmp_path / "ws"
    (ws / "keep").mkdir(parents=True)
    llm.script(Reply.tool_calls([("terminal", {"command": "rm -rf keep"})]), Reply.text("could not clean up"))
    async with cron_gateway(tmp_path, llm, agent__workspace=ws) as runner:
        async with Tab(runner) as tab:
            await add_job(runner, "in 1s", f"webchat:{tab.chat_id}", name="cleanup")
            assert await tab.reply() == "⏰ cleanup\n\ncould not clean up"
        assert (ws / "keep").exists()
        [tool_result] = [m["content"] for r in llm.requests for m in r["messages"] if m["role"] == "tool"]
        assert "nobody is present" in tool_result and "NOT run" in tool_result
        assert "cron" not in {t["function"]["name"] for t in llm.requests[0]["tools"]}  # no job management


async def test_ask_owner_sends_the_approval_to_the_owners_chat(tmp_path, llm: FakeLLM):
    ws = tmp_path / "ws"
    (ws / "old").mkdir(parents=True)
    llm.script(Reply.tool_calls([("terminal", {"command": "rm -rf old"})]), Reply.text("cleaned"))
    async with cron_gateway(tmp_path, llm, agent__workspace=ws, approvals__cron="ask-owner") as runner:
        async with Tab(runner) as owner_tab:
            await add_job(runner, "in 1s", "none", name="cleanup", owner_chat=f"webchat:{owner_tab.chat_id}")
            prompt = await owner_tab.wait_for(lambda f: f["type"] == "message" and bool(f.get("buttons")))
            assert "rm -rf old" in prompt["text"] and 'scheduled job #1 "cleanup"' in prompt["text"]
            data = next(b["data"] for row in prompt["buttons"] for b in row if b["text"] == "Allow once")
            await owner_tab.send_raw({"type": "button", "message_id": prompt["message_id"], "data": data})
            [run] = await wait_runs(runner, 1)
        assert run["output"] == "cleaned" and not (ws / "old").exists()


# -- the agent and the chat manage jobs ------------------------------------------------------


async def test_the_agent_creates_a_job_from_a_chat_request_and_it_fires_here(tmp_path, llm: FakeLLM):
    llm.script(Reply.tool_calls([("cron", {"action": "create", "name": "tea", "schedule": "in 2s",
                                           "prompt": "Remind the user: the tea is ready"})]),
               Reply.text("I'll remind you in 2 seconds."))
    async with cron_gateway(tmp_path, llm) as runner:
        async with Tab(runner) as tab:
            await tab.say("remind me about the tea in 2 seconds")
            prompt = await tab.wait_for(is_prompt)  # a job the agent writes runs unattended: a person says yes
            assert "schedule this job" in prompt["text"] and "schedule: in 2s" in prompt["text"]
            assert "Remind the user: the tea is ready" in prompt["text"] and f"webchat:{tab.chat_id}" in prompt["text"]
            await press(tab, prompt, "Allow once")
            assert await tab.reply(2) == "I'll remind you in 2 seconds."
            tool_result = llm.requests[1]["messages"][-1]["content"]
            assert "Created: #1 tea" in tool_result and f"webchat:{tab.chat_id}" in tool_result
            assert await tab.reply(3) == "⏰ tea\n\necho: Remind the user: the tea is ready"
        [job] = await runner.parts.jobs.list()
        assert (job.owner_platform, job.owner_id, job.state) == ("webchat", "local", "finished")


async def test_cron_chat_command_lists_pauses_resumes_runs_and_removes(tmp_path, llm: FakeLLM):
    async with cron_gateway(tmp_path, llm) as runner:
        async with Tab(runner) as tab:
            job = await add_job(runner, "every 1h", f"webchat:{tab.chat_id}", name="digest", prompt="digest")
            await runner.parts.jobs.create(name="not mine", prompt="x", schedule="every 1h", target="none",
                                     owner_platform="telegram", owner_id="999")
            await tab.say("/cron list")
            listing = await tab.reply()
            assert listing.startswith(f"#{job.id} digest — every hour, active") and "not mine" not in listing
            await tab.say("/cron pause digest")
            assert (await tab.reply(2)).startswith("Paused: #1 digest")
            await tab.say("/cron pause 2")
            assert await tab.reply(3) == "No job '2' of yours"
            await tab.say("/cron resume 1")
            assert "active, next" in await tab.reply(4)
            await tab.say("/cron run 1")
            assert await tab.reply(5) == f"Job #1 digest will run now; its result goes to webchat:{tab.chat_id}."
            assert await tab.reply(6) == "⏰ digest (run now)\n\necho: digest"
            await tab.say("/cron remove 1")
            assert (await tab.reply(7)).startswith("Removed job #1 digest")
            await tab.say("/cron explode")
            assert (await tab.reply(8)).startswith("Usage: /cron list|pause|resume|remove|run")
        assert [j.name for j in await runner.parts.jobs.list()] == ["not mine"]
        [manual] = await runs(runner)
        assert manual["manual"] == 1 and manual["state"] == "ok"


async def test_cli_changes_reach_the_running_daemon_without_a_restart(tmp_path, llm: FakeLLM, capsys):
    env = gateway_env(tmp_path, llm.base_url, **FAST)
    async with cron_gateway(tmp_path, llm) as runner:
        async with Tab(runner) as tab:
            os.environ.update(env)
            try:
                assert await asyncio.to_thread(cli.main, ["cron", "add", "ping", "in 1s", "pong",
                                                          "--to", f"webchat:{tab.chat_id}"]) == 0
            finally:
                for name in env:
                    os.environ.pop(name, None)
            assert "the running gateway picks this up" in capsys.readouterr().out
            assert await tab.reply(timeout=5) == "⏰ ping\n\necho: pong"


async def test_a_job_another_process_adds_just_after_start_fires_on_time(tmp_path, llm: FakeLLM):
    async with cron_gateway(tmp_path, llm, gateway__tick_seconds="30") as runner:  # only the watch can see it
        async with offline_jobs(tmp_path) as jobs:
            job = await jobs.create(name="early", prompt="hi", schedule="in 2s", target="none",
                                    owner_platform="cli", owner_id="operator")
        [run] = await wait_runs(runner, 1, timeout=6)
        assert run["started_at"] >= run["scheduled_at"] == job.next_run_at
        assert runner.parts.tick.count == 1  # the 30 s tick did not come: the one-second watch armed it


# -- downtime, crashes and two processes -----------------------------------------------------


@pytest.mark.parametrize("policy, expected", [("run_once", "ok"), ("skip", "skipped")])
async def test_gateway_down_at_the_scheduled_time(tmp_path, llm: FakeLLM, policy: str, expected: str):
    async with offline_jobs(tmp_path) as jobs:
        job = await jobs.create(name="while down", prompt="catch up", schedule="in 1s", target="webchat:tab-0001",
                                owner_platform="cli", owner_id="operator", missed_policy=policy)
    await asyncio.sleep(2.5)  # the time passes with no gateway running
    async with cron_gateway(tmp_path, llm) as runner:
        async with Tab(runner, "tab-0001") as tab:
            [run] = await wait_runs(runner, 1, states=(expected,))
            assert run["scheduled_at"] == job.next_run_at
            if expected == "ok":
                assert run["started_at"] - run["scheduled_at"] > 1.0  # it ran late, once
                assert await tab.reply() == "⏰ while down\n\necho: catch up"
            else:
                assert "policy skip" in run["error"]
                await asyncio.sleep(0.6)
                assert tab.replies() == [] and llm.requests == []
            assert len(await runs(runner)) == 1


async def test_missed_slots_of_a_repeating_job_run_once_and_the_ledger_says_which(tmp_path, llm: FakeLLM):
    async with offline_jobs(tmp_path) as jobs:
        await jobs.create(name="often", prompt="tick", schedule="every 1s", target="none",
                          owner_platform="cli", owner_id="operator")
    await asyncio.sleep(3.6)
    async with cron_gateway(tmp_path, llm) as runner:
        await wait_runs(runner, 1)
        ledger = await runs(runner)
        first_ok = next(i for i, r in enumerate(ledger) if r["state"] == "ok")
        assert [r["state"] for r in ledger[:first_ok]] == ["missed"] * first_ok and first_ok >= 2
        slots = [r["scheduled_at"] for r in ledger[:first_ok + 1]]
        assert [round(b - a, 3) for a, b in zip(slots, slots[1:])] == [1.0] * first_ok
        assert len(llm.requests) == len([r for r in ledger if r["state"] == "ok"])


async def test_killed_mid_run_is_marked_interrupted_and_not_run_again(tmp_path):
    async with FakeLLM() as llm:
        llm.script(Reply.hang())
        async with offline_jobs(tmp_path) as jobs:
            await jobs.create(name="long", prompt="work hard", schedule="in 1s", target="webchat:tab-0001",
                              owner_platform="cli", owner_id="operator")
        env = {**os.environ, **gateway_env(tmp_path, llm.base_url, **FAST)}
        first = subprocess.Popen([sys.executable, "-m", "gateway", "run"], env=env,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            await llm.wait_for_requests(1, timeout=20)  # claimed and running
            first.send_signal(signal.SIGKILL)
            first.wait(5)
        finally:
            first.kill()
        async with cron_gateway(tmp_path, llm) as runner:
            async with Tab(runner, "tab-0001") as tab:
                [run] = await wait_runs(runner, 1, states=("interrupted",))
                assert "stopped during the run" in run["error"]
                assert "was interrupted" in await tab.reply()
                await asyncio.sleep(1.0)
                assert len(llm.requests) == 1  # not silently re-run
                assert [r["state"] for r in await runs(runner)] == ["interrupted"]


async def test_two_gateways_on_one_database_run_each_slot_once(tmp_path, llm: FakeLLM):
    async with cron_gateway(tmp_path, llm) as first, cron_gateway(tmp_path, llm) as second:
        await each_slot_once(first, second, llm)


async def test_two_instances_on_postgresql_run_each_slot_once(tmp_path, llm: FakeLLM, shared_database: str):
    async with cron_gateway(tmp_path / "a", llm) as first, cron_gateway(tmp_path / "b", llm) as second:
        await each_slot_once(first, second, llm)


async def each_slot_once(first: GatewayRunner, second: GatewayRunner, llm: FakeLLM) -> None:
    """A job due every second on two gateways of one database: each slot runs once, on one of them."""
    llm.latency = 0.05
    await add_job(first, "every 1s", "none", name="shared")
    done = await wait_runs(first, 5, timeout=15)
    slots = [r["scheduled_at"] for r in done]
    assert len(slots) == len(set(slots))
    await asyncio.sleep(0.3)
    finished = [r for r in await runs(first) if r["state"] == "ok"]
    assert len(llm.requests) == len(finished)  # a slot run twice would be an extra LLM request
    claimers = {r["claimed_by"] for r in finished}
    assert claimers <= {first.parts.cron_timers.ledger.instance_id, second.parts.cron_timers.ledger.instance_id}


# -- the ledger's arithmetic on a fake clock -------------------------------------------------


def ts(text: str) -> float:
    return datetime.fromisoformat(text).astimezone(UTC).timestamp()


@pytest.mark.parametrize("slot, following", [
    ("2026-10-24T09:00+02:00", "2026-10-25T09:00+01:00"),  # Berlin falls back overnight
    ("2027-03-27T09:00+01:00", "2027-03-28T09:00+02:00"),  # and springs forward
])
async def test_cron_in_a_dst_zone_keeps_the_local_time_across_the_change(tmp_path, slot: str, following: str):
    store = await Store.open(tmp_path / "state.db")
    try:
        jobs, ledger = CronJobs(store.cron), RunLedger(store.cron, new_instance_id())
        job = await jobs.create(name="morning", prompt="p", schedule="0 9 * * *", timezone="Europe/Berlin",
                                target="none", owner_platform="cli", owner_id="operator")
        await store.write(lambda db: db.execute("UPDATE cron_jobs SET next_run_at = ? WHERE id = ?",
                                                ts(slot), job.id))
        outcome = await ledger.claim_slot(job.id, ts(slot), ts(slot) + 0.2, on_time=1.0, grace=3600)
        assert outcome.claim is not None and outcome.claim.scheduled_at == ts(slot)
        assert outcome.next_run_at == ts(following)
        again = await ledger.claim_slot(job.id, ts(slot), ts(slot) + 0.3, on_time=1.0, grace=3600)
        assert again.claim is None and again.recorded == "taken"  # the slot is claimed once
    finally:
        await store.close()
