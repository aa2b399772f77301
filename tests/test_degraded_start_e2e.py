"""Start degraded, never down: a platform that cannot connect (nothing listens on its address, it
answers 5xx, it refuses the token, Discord lacks its intent) leaves the web chat serving; one that
may come back is tried again until it does, without a restart; `chatgate run` exits (78, which the
unit does not restart on) only when every platform refused for good."""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Any

import aiohttp
import discord
import pytest

from gateway.ops.process import EXIT_REFUSED
from tests.fakes.discord import FakeDiscord
from tests.fakes.llm import FakeLLM, Reply
from tests.fakes.slack import FakeSlack
from tests.fakes.telegram import FakeTelegram
from tests.harness import (
    ANN,
    Tab,
    eventually,
    free_port,
    gateway_env,
    run_until_it_exits,
    start_gateway,
    wait_for_text,
)
from tests.test_metrics_logs import sample


def beside_the_web_chat(url: str, token: str = "123:ABC") -> dict[str, Any]:
    """Telegram at `url`, and the web chat on as well."""
    return {"platforms__telegram__token": token, "platforms__telegram__base_url": url,
            "platforms__telegram__poll_timeout": 1, "platforms__webchat__enabled": "true",
            "access__allowed_users": f"{{telegram: [{ANN}]}}"}


async def get(runner: Any, path: str) -> tuple[int, Any]:
    async with aiohttp.ClientSession() as http, http.get(f"http://127.0.0.1:{runner.http.port}{path}") as response:
        return response.status, await (response.json() if path == "/readyz" else response.text())


async def web_chat_answers(runner: Any) -> None:
    async with Tab(runner) as tab:
        await tab.say("hello meanwhile")
        assert await tab.reply() == "echo: hello meanwhile"


def lines(caplog: pytest.LogCaptureFixture, level: int, start: str = "") -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == level and r.getMessage().startswith(start)]


async def test_a_telegram_nobody_answers_leaves_the_web_chat_serving_and_comes_up_without_a_restart(
        tmp_path, llm: FakeLLM, caplog: pytest.LogCaptureFixture):
    caplog.set_level(logging.INFO)
    port = free_port()  # nothing listens there: every connection is refused
    runner = await start_gateway(tmp_path, llm.base_url, **beside_the_web_chat(f"http://127.0.0.1:{port}"))
    try:
        status, body = await get(runner, "/readyz")
        telegram = body["platforms"]["telegram"]
        assert status == 200 and body["ready"] and body["degraded"], body
        assert telegram["state"] == "down" and f"127.0.0.1:{port}" in telegram["error"], telegram
        assert "platforms.telegram.base_url" in telegram["error"]
        [warning] = lines(caplog, logging.WARNING, "telegram cannot connect")
        assert f"check platforms.telegram.base_url (http://127.0.0.1:{port}) or the network" in warning
        assert sample((await get(runner, "/metrics"))[1], "chatgate_platform_up", '{platform="telegram"}') == 0
        await web_chat_answers(runner)

        async with FakeTelegram(port=port) as tg:  # the Bot API is back, on the configured address
            try:
                await tg.wait_for("getUpdates", timeout=20)
                tg.user_message("are you there?")
                await wait_for_text(tg, "echo: are you there?", timeout=20)
                status, body = await get(runner, "/readyz")
                assert status == 200 and body["platforms"]["telegram"]["state"] == "ready" and not body["degraded"]
                assert sample((await get(runner, "/metrics"))[1], "chatgate_platform_up", '{platform="telegram"}') == 1
                assert lines(caplog, logging.INFO, "telegram is up, after")
                assert tg.commands  # its command menu, once it was up
            finally:
                await runner.stop()
    finally:
        await runner.stop()


async def test_a_telegram_answering_5xx_is_tried_again_while_the_web_chat_serves(tmp_path, llm: FakeLLM,
                                                                                 tg: FakeTelegram):
    tg.fail_next("getMe", 502, description="Bad Gateway", count=2)
    runner = await start_gateway(tmp_path, llm.base_url, **beside_the_web_chat(tg.url))
    try:
        status, body = await get(runner, "/readyz")
        telegram = body["platforms"]["telegram"]
        assert status == 200 and telegram["state"] == "down" and "Bad Gateway" in telegram["error"], telegram
        await web_chat_answers(runner)
        await tg.wait_for("getUpdates", timeout=20)
        tg.user_message("back?")
        await wait_for_text(tg, "echo: back?", timeout=20)
        assert [c.status for c in tg.calls_to("getMe")] == [502, 502, 200]
    finally:
        await runner.stop()


async def test_a_refused_token_is_one_error_line_no_retries_and_the_web_chat_serves(
        tmp_path, llm: FakeLLM, tg: FakeTelegram, caplog: pytest.LogCaptureFixture):
    caplog.set_level(logging.INFO)
    runner = await start_gateway(tmp_path, llm.base_url, **beside_the_web_chat(tg.url, token="999:WRONG"))
    try:
        status, body = await get(runner, "/readyz")
        telegram = body["platforms"]["telegram"]
        assert status == 200 and telegram["state"] == "failed" and "refused the bot token" in telegram["error"]
        await web_chat_answers(runner)
        await asyncio.sleep(1.5)  # past the time of a first try again (1 to 1.25 s): none is made
        assert [c.status for c in tg.calls] == [401]  # one getMe, refused
        assert lines(caplog, logging.ERROR) == [
            "telegram: Telegram refused the bot token (platforms.telegram.token / TELEGRAM_BOT_TOKEN)"]
        assert not runner.connections.failed.is_set()  # the web chat still serves
    finally:
        await runner.stop()


@pytest.fixture
def discord_restored(monkeypatch: pytest.MonkeyPatch) -> None:
    """The adapter points discord.py's class attributes at the fake; put them back afterwards."""
    monkeypatch.setattr(discord.http.Route, "BASE", discord.http.Route.BASE)
    monkeypatch.setattr(discord.gateway.DiscordWebSocket, "DEFAULT_GATEWAY",
                        discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY)


def discord_beside_the_web_chat(api_base: str, gateway_url: str, token: str = "fake-token") -> dict[str, Any]:
    return {"platforms__discord__token": token, "platforms__discord__api_base": api_base,
            "platforms__discord__gateway_url": gateway_url, "platforms__webchat__enabled": "true",
            "access__allowed_users": f"{{discord: [{ANN}]}}"}


async def test_a_discord_without_its_intent_is_reported_once_and_the_web_chat_serves(
        tmp_path, llm: FakeLLM, discord_restored: None, caplog: pytest.LogCaptureFixture):
    caplog.set_level(logging.INFO)
    async with FakeDiscord(enabled_intents=0) as dc:
        runner = await start_gateway(tmp_path, llm.base_url,
                                     **discord_beside_the_web_chat(dc.api_base, dc.gateway_url))
        try:
            status, body = await get(runner, "/readyz")
            assert status == 200 and body["platforms"]["discord"]["state"] == "failed"
            assert "Message Content Intent" in body["platforms"]["discord"]["error"]
            await web_chat_answers(runner)
            [error] = lines(caplog, logging.ERROR)
            assert error.startswith("discord: Discord refused the Message Content intent")
        finally:
            await runner.stop()


async def test_a_discord_nobody_answers_is_down_then_answers_once_it_is_there(
        tmp_path, llm: FakeLLM, discord_restored: None, caplog: pytest.LogCaptureFixture):
    caplog.set_level(logging.INFO)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    runner = await start_gateway(tmp_path, llm.base_url,
                                 **discord_beside_the_web_chat(f"{url}/api/v10", f"ws://127.0.0.1:{port}/gateway"))
    try:
        status, body = await get(runner, "/readyz")
        discord_state = body["platforms"]["discord"]
        assert status == 200 and discord_state["state"] == "down", discord_state
        assert f"platforms.discord.api_base ({url}/api/v10)" in discord_state["error"]
        await web_chat_answers(runner)
        async with FakeDiscord(port=port) as dc:
            try:
                await eventually(lambda: runner.connections.readiness()["discord"]["state"] == "ready", 20, "discord ready")
                assert lines(caplog, logging.INFO, "discord is up, after")
                dc.user_message("and discord?")
                await dc.wait_until(lambda: [m.content for m in dc.sent_messages()] == ["echo: and discord?"], 20)
            finally:
                await runner.stop()
    finally:
        await runner.stop()


async def test_what_telegram_delivered_before_is_answered_once_it_is_back(tmp_path, llm: FakeLLM):
    port = free_port()
    settings = beside_the_web_chat(f"http://127.0.0.1:{port}")
    async with FakeTelegram(port=port) as tg:
        llm.script(Reply.hang())
        runner = await start_gateway(tmp_path, llm.base_url, **settings)
        try:
            tg.user_message("remember me")
            await llm.wait_for_requests(1, timeout=10)
        finally:
            await runner.stop()  # the turn is cut off: its message stays in the inbox, unfinished
    runner = await start_gateway(tmp_path, llm.base_url, **settings)  # Telegram is gone meanwhile
    try:
        assert runner.connections.readiness()["telegram"]["state"] == "down"
        await llm.wait_for_requests(2, timeout=10)  # the message is answered; its reply waits for Telegram

        async def reply_waits() -> bool:
            return (await runner.parts.store.inbox.trouble_counts()).get("pending_replies") == 1

        await eventually(reply_waits, what="the reply waiting in the outbox")
        async with FakeTelegram(port=port) as tg:
            try:
                await wait_for_text(tg, "echo: remember me", timeout=20)
                assert [m.text for m in tg.sent_messages(ANN)] == ["echo: remember me"]
            finally:
                await runner.stop()
    finally:
        await runner.stop()


async def test_chatgate_run_exits_78_when_every_platform_refuses_for_good(tmp_path, tg: FakeTelegram):
    async with FakeSlack() as slack:
        settings = {"platforms__telegram__token": "999:WRONG", "platforms__telegram__base_url": tg.url,
                    "platforms__slack__bot_token": "xoxb-wrong", "platforms__slack__api_base": slack.api_base,
                    "platforms__slack__app_token": slack.app_token}
        env = {**os.environ, **gateway_env(tmp_path, None, **settings)}
        code, output = await run_until_it_exits(env)
    assert code == EXIT_REFUSED == 78
    [line] = [text for text in output if text.startswith("chatgate cannot start:")]
    assert "telegram: Telegram refused the bot token" in line and "slack: Slack refused the bot token" in line, line
    assert "Traceback" not in "\n".join(output)


async def test_a_discord_gateway_nobody_answers_is_down_with_the_reason(tmp_path, llm: FakeLLM,
                                                                        discord_restored: None):
    async with FakeDiscord() as dc:  # its REST API answers; the gateway address is wrong
        runner = await start_gateway(tmp_path, llm.base_url, **discord_beside_the_web_chat(
            dc.api_base, f"ws://127.0.0.1:{free_port()}/gateway"))
        try:
            discord_state = runner.connections.readiness()["discord"]
            assert discord_state["state"] == "down" and "gateway could not be reached" in discord_state["error"]
            assert "platforms.discord.gateway_url" in discord_state["error"]
            await web_chat_answers(runner)
        finally:
            await runner.stop()
