"""Who sends the bot a code (`chatgate setup` learns the admin's id so): read with getUpdates through
python-telegram-bot, nothing marked read, so the daemon later gets every message, this one too."""

from __future__ import annotations

import asyncio

from platforms.telegram.config import TelegramConfig

POLL_SECONDS = 20  # getUpdates' long poll


async def sender(section: TelegramConfig, code: str, wait: float) -> tuple[str, str] | None:
    """The user id and name of whoever sends the bot `code` (as `/start CODE` from the bot's link, or as
    text) within `wait` seconds; None when nobody does."""
    from telegram import Bot
    from telegram.request import HTTPXRequest

    assert section.token is not None
    base = section.base_url.rstrip("/")
    bot = Bot(section.token.get_secret_value(), base_url=f"{base}/bot", base_file_url=f"{base}/file/bot",
              get_updates_request=HTTPXRequest(connection_pool_size=1, read_timeout=POLL_SECONDS + 10.0))
    try:
        async with bot, asyncio.timeout(wait):
            while True:
                updates = await bot.get_updates(timeout=POLL_SECONDS, allowed_updates=["message"])
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
