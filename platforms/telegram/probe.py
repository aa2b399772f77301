"""Whether Telegram takes the bot token: getMe through python-telegram-bot (`chatgate doctor`, `setup`)."""

from __future__ import annotations

from platforms.base import PlatformRefused
from platforms.telegram.config import TelegramConfig

FIX = "get a new token from @BotFather (/mybots → your bot → API Token) and set platforms.telegram.token " \
      "(or TELEGRAM_BOT_TOKEN)"


async def probe(section: TelegramConfig, timeout: float) -> tuple[str, str | None]:
    """(who the bot is, its user name); `PlatformRefused` when Telegram refuses the token."""
    from telegram import Bot
    from telegram.error import InvalidToken
    from telegram.request import HTTPXRequest

    assert section.token is not None
    base = section.base_url.rstrip("/")
    request = HTTPXRequest(connection_pool_size=1, connect_timeout=timeout, read_timeout=timeout)
    bot = Bot(section.token.get_secret_value(), base_url=f"{base}/bot", base_file_url=f"{base}/file/bot",
              request=request)
    try:
        async with bot:  # (initialize: getMe)
            me = bot.bot
    except InvalidToken:
        raise PlatformRefused(f"Telegram refused the bot token — {FIX}") from None
    return f"@{me.username} (id {me.id})", me.username
