"""Whether a platform takes its token: one cheap authenticated call, the one each platform documents
for it, made the way the platform's settings say (its `base_url`/`api_base`, so a test double or a
proxy is asked instead), within a time limit. `chatgate doctor` and `chatgate setup` use it.

- Telegram: getMe, through python-telegram-bot (`Bot.get_me`, made by `Bot.initialize`).
- Slack: auth.test with the bot token, and in Socket Mode apps.connections.open with the app-level
  token (the check Slack documents for an `xapp-` token), through slack_sdk's `AsyncWebClient`.
- Discord: GET /users/@me with the bot token, over aiohttp (discord.py reaches another address only
  through a class attribute shared by the whole process; its login also asks for the application).
- The model endpoint (`check_llm`): a model listing through chatgate's LLM client.

A platform's SDK is imported only when its token is tested. Platforms without a token (the web chat)
have no probe.
"""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass
from typing import Any, Awaitable, Callable
from urllib.parse import urlsplit

from platforms.base import shown_url

PROBE_SECONDS = 10.0  # per platform; the probes of several platforms run side by side


@dataclass(frozen=True, slots=True)
class Verdict:
    """A probe's answer: `ok` with who the bot is (`text`, and its user name when it has one), or
    what is wrong and how to fix it (`text`, one line)."""

    platform: str
    ok: bool
    text: str
    username: str | None = None


class Refused(Exception):
    """The platform answered and refused the token (the message: what it said, then how to fix it)."""


@dataclass(frozen=True, slots=True)
class _Probe:
    call: Callable[[Any, float], Awaitable[tuple[str, str | None]]]  # (section, timeout) → (who, user name)
    address: Callable[[Any], str]  # the address asked, and the key that sets it
    secrets: Callable[[Any], list[str]]  # the tokens, to keep out of error texts


def _secret(value: Any) -> str:
    return value.get_secret_value() if value is not None else ""


def _where(section: Any) -> str:
    return getattr(section, "base_url", None) or getattr(section, "api_base", "")


TELEGRAM_FIX = ("get a new token from @BotFather (/mybots → your bot → API Token) and set platforms.telegram.token "
                "(or TELEGRAM_BOT_TOKEN)")
DISCORD_FIX = ("reset the token at https://discord.com/developers/applications → your app → Bot → Reset Token "
               "and set platforms.discord.token (or DISCORD_BOT_TOKEN)")
SLACK_BOT_FIX = ("copy the Bot User OAuth Token (xoxb-…) at https://api.slack.com/apps → your app → "
                 "OAuth & Permissions (reinstall the app if it was revoked) and set platforms.slack.bot_token "
                 "(or SLACK_BOT_TOKEN)")
SLACK_APP_FIX = ("generate an app-level token (xapp-…, scope connections:write) at https://api.slack.com/apps → "
                 "your app → Basic Information → App-Level Tokens and set platforms.slack.app_token "
                 "(or SLACK_APP_TOKEN)")
SLACK_REFUSALS = {"invalid_auth", "not_authed", "account_inactive", "token_revoked", "token_expired",
                  "not_allowed_token_type", "missing_scope"}


async def _telegram(section: Any, timeout: float) -> tuple[str, str | None]:
    from telegram import Bot
    from telegram.error import InvalidToken
    from telegram.request import HTTPXRequest

    base = section.base_url.rstrip("/")
    request = HTTPXRequest(connection_pool_size=1, connect_timeout=timeout, read_timeout=timeout)
    bot = Bot(_secret(section.token), base_url=f"{base}/bot", base_file_url=f"{base}/file/bot", request=request)
    try:
        async with bot:  # (initialize: getMe)
            me = bot.bot
    except InvalidToken:
        raise Refused(f"Telegram refused the bot token — {TELEGRAM_FIX}") from None
    return f"@{me.username} (id {me.id})", me.username


async def _discord(section: Any, timeout: float) -> tuple[str, str | None]:
    import aiohttp

    headers = {"Authorization": f"Bot {_secret(section.token)}", "User-Agent": "DiscordBot (chatgate, 1)"}
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout)) as session:
        async with session.get(f"{section.api_base.rstrip('/')}/users/@me", headers=headers) as response:
            if response.status == 401:
                raise Refused(f"Discord refused the bot token (401) — {DISCORD_FIX}")
            response.raise_for_status()
            me = await response.json(content_type=None)
    return f"{me.get('username')} (id {me.get('id')})", me.get("username")


async def _slack(section: Any, timeout: float) -> tuple[str, str | None]:
    from slack_sdk.errors import SlackApiError
    from slack_sdk.web.async_client import AsyncWebClient

    client = AsyncWebClient(token=_secret(section.bot_token), base_url=section.api_base, timeout=math.ceil(timeout))
    token, fix = "bot token", SLACK_BOT_FIX
    try:
        me = await client.auth_test()
        if section.mode == "socket":
            token, fix = "app-level token", SLACK_APP_FIX
            await client.apps_connections_open(app_token=_secret(section.app_token))
    except SlackApiError as exc:
        error = exc.response.get("error") if exc.response is not None else None
        if error in SLACK_REFUSALS:
            raise Refused(f"Slack refused the {token} ({error}) — {fix}") from None
        raise RuntimeError(f"Slack answered {error or exc.response.status_code}") from None
    return f"{me.get('user')} in {me.get('team')} (bot user {me.get('user_id')})", me.get("user")


PROBES: dict[str, _Probe] = {
    "telegram": _Probe(_telegram, lambda s: f"platforms.telegram.base_url ({shown_url(s.base_url)})",
                       lambda s: [_secret(s.token)]),
    "discord": _Probe(_discord, lambda s: f"platforms.discord.api_base ({shown_url(s.api_base)})",
                      lambda s: [_secret(s.token)]),
    "slack": _Probe(_slack, lambda s: f"platforms.slack.api_base ({shown_url(s.api_base)})",
                    lambda s: [_secret(s.bot_token), _secret(s.app_token)]),
}


def _said(exc: BaseException, secrets: list[str]) -> str:
    """An error in a line, without the tokens (Telegram's are in every URL)."""
    text = str(exc) or type(exc).__name__
    if type(exc).__module__.split(".")[0] not in ("builtins", "gateway"):
        text = f"{type(exc).__name__}: {text}" if str(exc) else text
    for secret in filter(None, secrets):
        text = text.replace(secret, "<token>")
    return text[:200]


async def probe(platform: str, section: Any, timeout: float = PROBE_SECONDS) -> Verdict | None:
    """Ask `platform` whether it takes the token in `section` (its config model); None for a
    platform that has no token to test."""
    found = PROBES.get(platform)
    if found is None:
        return None
    try:
        async with asyncio.timeout(timeout):
            who, username = await found.call(section, timeout)
    except Refused as exc:
        return Verdict(platform, False, str(exc))
    except TimeoutError:
        return Verdict(platform, False, f"no answer within {timeout:g}s — check {found.address(section)} "
                                        "and the network")
    except Exception as exc:  # DNS, a refused connection, TLS, a 5xx: anything else is about the way there
        host = urlsplit(_where(section)).hostname or "it"
        return Verdict(platform, False, f"cannot reach {host}: {_said(exc, found.secrets(section))} — check "
                                        f"{found.address(section)} and the network")
    return Verdict(platform, True, who, username)


async def check_llm(base_url: str | None, api_key: str | None, model: str) -> list[tuple[str, str]]:
    """Whether the model endpoint answers a model listing with this key, and lists the model: report
    lines as (" ok "|"warn"|"FAIL", text). (A listing costs nothing; a chat completion would be billed.)"""
    from agent.llm import LLMClient, LLMSettings

    client = LLMClient(LLMSettings(model=model, base_url=base_url, api_key=api_key))
    try:
        problem = await client.probe()
        if problem is not None:
            return [("FAIL", f"llm endpoint: {problem}")]
        models = await client.models()
    finally:
        await client.aclose()
    lines = [(" ok ", "llm endpoint answers")]
    if models and model not in models:
        lines.append(("warn", f"llm: model {model!r} is not in the endpoint's list ({', '.join(models[:8])}…)"))
    return lines
