"""`chatgate doctor` asks each configured platform whether it takes its token (Telegram getMe, Slack
auth.test and, in Socket Mode, apps.connections.open, Discord GET /users/@me), through the real
clients against the fakes, as a person runs it: a good token is named with the bot it belongs to, a
refused one says where to get a new one and which key to set, an address nobody answers names the
setting that points there; the exit status is not 0 when one fails, and no token is ever printed."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

from tests.fakes.discord import FakeDiscord
from tests.fakes.llm import FakeLLM
from tests.fakes.slack import FakeSlack
from tests.fakes.telegram import FakeTelegram
from tests.harness import free_port, gateway_env


async def doctor(home: Path, llm: FakeLLM, *args: str, **settings: object) -> tuple[int, list[str]]:
    """`chatgate doctor ARGS` in a process of its own (the fakes go on answering meanwhile): its exit
    status and the report's lines about the platforms."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TELEGRAM_", "SLACK_", "DISCORD_"))}
    env.update(gateway_env(home, llm.base_url, agent__sandbox__mode="off", **settings))
    process = await asyncio.create_subprocess_exec(sys.executable, "-m", "gateway", "doctor", *args, env=env,
                                                   stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(process.communicate(), 60)
    assert b"Traceback" not in err, err.decode()
    lines = out.decode().splitlines()
    assert process.returncode is not None and lines[-1] == ("all good" if process.returncode == 0 else "problems found")
    return process.returncode, [line for line in lines if line[7:].startswith(("telegram", "slack", "discord"))]


async def test_telegram_good_refused_and_unreachable(tmp_path: Path, llm: FakeLLM, tg: FakeTelegram):
    status, lines = await doctor(tmp_path, llm, platforms__telegram__token=tg.token,
                                 platforms__telegram__base_url=tg.url)
    assert (status, lines) == (0, ["[ ok ] telegram: @chatgate_bot (id 123)"])
    assert len(tg.calls_to("getMe")) == 1

    status, lines = await doctor(tmp_path, llm, platforms__telegram__token="123:revoked",
                                 platforms__telegram__base_url=tg.url)
    assert status == 1
    assert lines == ["[FAIL] telegram: Telegram refused the bot token — get a new token from @BotFather (/mybots → "
                     "your bot → API Token) and set platforms.telegram.token (or TELEGRAM_BOT_TOKEN)"]

    nobody = f"http://127.0.0.1:{free_port()}"
    status, lines = await doctor(tmp_path, llm, platforms__telegram__token="123:secret-part",
                                 platforms__telegram__base_url=nobody)
    assert status == 1 and len(lines) == 1
    assert lines[0].startswith("[FAIL] telegram: cannot reach 127.0.0.1: ")
    assert lines[0].endswith(f"— check platforms.telegram.base_url ({nobody}) and the network")
    assert "secret-part" not in lines[0]


async def test_a_platform_that_does_not_answer_in_time(tmp_path: Path, llm: FakeLLM, tg: FakeTelegram):
    release = tg.hold_next("getMe")
    try:
        status, lines = await doctor(tmp_path, llm, "--timeout", "0.5", platforms__telegram__token=tg.token,
                                     platforms__telegram__base_url=tg.url)
    finally:
        release.set()
    assert status == 1
    assert lines == [f"[FAIL] telegram: no answer within 0.5s — check platforms.telegram.base_url ({tg.url}) "
                     "and the network"]


async def test_slack_both_tokens_and_discord(tmp_path: Path, llm: FakeLLM):
    async with FakeSlack() as slack, FakeDiscord() as discord:
        settings = {"platforms__slack__bot_token": slack.bot_token, "platforms__slack__app_token": slack.app_token,
                    "platforms__slack__api_base": slack.api_base, "platforms__discord__token": discord.token,
                    "platforms__discord__api_base": discord.api_base}
        status, lines = await doctor(tmp_path, llm, **settings)
        assert status == 0, lines
        assert sorted(lines) == ["[ ok ] discord: chatgate (id 9000)",
                                 "[ ok ] slack: chatgate in Fake Team (bot user UBOT)"]
        assert [c.token for c in slack.calls_to("apps.connections.open")] == [slack.app_token]

        status, lines = await doctor(tmp_path, llm, **{**settings, "platforms__slack__app_token": "xapp-revoked",
                                                       "platforms__discord__token": "revoked"})
        assert status == 1
        assert sorted(lines) == [
            "[FAIL] discord: Discord refused the bot token (401) — reset the token at "
            "https://discord.com/developers/applications → your app → Bot → Reset Token and set "
            "platforms.discord.token (or DISCORD_BOT_TOKEN)",
            "[FAIL] slack: Slack refused the app-level token (invalid_auth) — generate an app-level token "
            "(xapp-…, scope connections:write) at https://api.slack.com/apps → your app → Basic Information → "
            "App-Level Tokens and set platforms.slack.app_token (or SLACK_APP_TOKEN)"]

        status, lines = await doctor(tmp_path, llm, **{**settings, "platforms__slack__bot_token": "xoxb-revoked"})
        assert status == 1 and lines[1].startswith("[FAIL] slack: Slack refused the bot token (invalid_auth) — copy "
                                                   "the Bot User OAuth Token"), lines
