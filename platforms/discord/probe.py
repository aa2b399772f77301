"""Whether Discord takes the bot token: GET /users/@me (`chatgate doctor`, `setup`). Over aiohttp,
at the section's `api_base`: discord.py's login also fetches the application, and reaches another
address only through a setting shared by the whole process."""

from __future__ import annotations

from platforms.base import PlatformRefused
from platforms.discord.config import DiscordConfig

FIX = "reset the token at https://discord.com/developers/applications → your app → Bot → Reset Token " \
      "and set platforms.discord.token (or DISCORD_BOT_TOKEN)"


async def probe(section: DiscordConfig, timeout: float) -> tuple[str, str | None]:
    """(who the bot is, its user name); `PlatformRefused` when Discord refuses the token."""
    import aiohttp

    assert section.token is not None
    headers = {"Authorization": f"Bot {section.token.get_secret_value()}", "User-Agent": "DiscordBot (chatgate, 1)"}
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout)) as session:
        async with session.get(f"{section.api_base.rstrip('/')}/users/@me", headers=headers) as response:
            if response.status == 401:
                raise PlatformRefused(f"Discord refused the bot token (401) — {FIX}")
            response.raise_for_status()
            me = await response.json(content_type=None)
    return f"{me.get('username')} (id {me.get('id')})", me.get("username")
