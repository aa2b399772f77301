"""What `chatgate setup` knows of each platform it sets up: where its token comes from, the keys it
goes in, how a person finds their own user id there, and (Telegram) reading that id from a message
the person sends the bot. Its tokens are tested by `gateway.ops.probes`."""

from __future__ import annotations

import os
import re
import secrets
from dataclasses import dataclass
from typing import Any

from gateway.cli.setup_files import Stop


@dataclass(frozen=True, slots=True)
class PlatformSetup:
    name: str
    title: str  # as people write it
    token: str  # the section's key for the (bot) token
    token_question: str
    address: str  # the section's key for the API's address (a self-hosted server, a proxy, a test double)
    find_id: str  # how a person finds their own user id there
    id_pattern: str  # what a user id looks like
    id_example: str


SETUPS = {
    "telegram": PlatformSetup(
        "telegram", "Telegram", "token", "Bot token (from @BotFather: /newbot, or /mybots → your bot → API Token)",
        "base_url", "Telegram: send @userinfobot a message; it answers with your numeric id", r"[0-9]{3,20}",
        "111111111"),
    "discord": PlatformSetup(
        "discord", "Discord", "token", "Bot token (https://discord.com/developers/applications → your app → Bot → "
        "Reset Token; switch on Message Content Intent there too)", "api_base",
        "Discord: Settings → Advanced → Developer Mode on, then right-click your name → Copy User ID",
        r"[0-9]{15,21}", "123456789012345678"),
    "slack": PlatformSetup(
        "slack", "Slack", "bot_token", "Bot User OAuth Token (xoxb-…: https://api.slack.com/apps → your app → OAuth & "
        "Permissions; make the app from deploy/slack-app-manifest.yaml)", "api_base",
        "Slack: your profile picture → Profile → ⋮ → Copy member ID", r"[UW][A-Z0-9]{2,20}", "U0123ABCD"),
}
SLACK_APP_TOKEN_QUESTION = ("App-level token for Socket Mode (xapp-…: Basic Information → App-Level Tokens → "
                            "Generate, scope connections:write)")
PLATFORMS = ("telegram", "discord", "slack", "webchat")  # (the web chat needs no token and no id: it is local)


def id_problem(platform: str, user_id: str) -> str | None:
    """Why `user_id` cannot be a user id on `platform`, or None."""
    setup = SETUPS[platform]
    if re.fullmatch(setup.id_pattern, user_id):
        return None
    return f"{user_id!r} does not look like a {setup.title} user id (e.g. {setup.id_example})"


def section_of(data: dict[str, Any], platform: str) -> dict[str, Any]:
    """The `platforms.<platform>` mapping of a config file's data (empty when unset)."""
    section = (data.get("platforms") or {}).get(platform)
    return section if isinstance(section, dict) else {}


def configured_platform(data: dict[str, Any]) -> str | None:
    """The platform a config file's data sets up (the first with a token, else the web chat when on)."""
    for name in ("telegram", "discord", "slack"):
        if section_of(data, name).get(SETUPS[name].token):
            return name
    return "webchat" if section_of(data, "webchat").get("enabled") is True else None


def platform_env(name: str) -> dict[str, str]:
    """The section's keys the platform's usual variables set now (TELEGRAM_BOT_TOKEN → token…)."""
    from platforms.registry import specs

    return {key: os.environ[var] for var, key in specs()[name].env.items() if os.environ.get(var)}


def section_model(values: dict[str, Any], data: dict[str, Any]) -> Any:
    """The platform's config model of the section as it will be written (raises Stop when it is not valid)."""
    from pydantic import ValidationError

    from platforms.registry import specs

    name = values["platform"]
    section = {**section_of(data, name), **{k: v for k, v in values.items() if k not in ("platform", "username")}}
    try:
        return specs()[name].config.model_validate(section)
    except ValidationError as exc:
        error = exc.errors()[0]
        raise Stop(f"chatgate setup: platforms.{name}.{'.'.join(map(str, error['loc']))}: {error['msg']}", 2) from None


def start_code() -> str:
    """A code for the person to send the bot, so that the message read is theirs, not a stranger's."""
    return secrets.token_hex(4)


async def telegram_sender(section: Any, code: str, wait: float) -> tuple[str, str] | None:
    """The user id and name of whoever sends the bot `code` (as `/start CODE` from the bot's link, or as
    text) within `wait` seconds, read with getUpdates; None when nobody does. Nothing is marked read:
    the daemon later gets every message, this one too."""
    import asyncio

    from telegram import Bot
    from telegram.request import HTTPXRequest

    base = section.base_url.rstrip("/")
    token = section.token.get_secret_value()
    poll = 20
    bot = Bot(token, base_url=f"{base}/bot", base_file_url=f"{base}/file/bot",
              get_updates_request=HTTPXRequest(connection_pool_size=1, read_timeout=poll + 10.0))
    try:
        async with bot, asyncio.timeout(wait):
            while True:
                updates = await bot.get_updates(timeout=poll, allowed_updates=["message"])
                for update in reversed(updates):
                    message = update.message
                    if message and message.from_user and message.text and code in message.text.split():
                        user = message.from_user
                        who = user.full_name + (f" (@{user.username})" if user.username else "")
                        return str(user.id), "".join(c for c in who if c.isprintable())  # (no terminal escapes)
                if updates:  # (others' messages, not marked read: the next poll would return them at once)
                    await asyncio.sleep(1.0)
    except TimeoutError:
        return None
