"""The registry's entry for Discord (`SPEC`): its config model, the variables that fill it and the factory
that imports its adapter only when it is configured."""

from __future__ import annotations

from typing import TYPE_CHECKING

from platforms.discord.config import DiscordConfig
from platforms.registry import AdapterEnv, PlatformSpec

if TYPE_CHECKING:
    from platforms.discord.adapter import DiscordAdapter


def create(config: DiscordConfig, env: AdapterEnv) -> "DiscordAdapter":
    from platforms.discord.adapter import DiscordAdapter

    assert config.token is not None
    return DiscordAdapter(config.token.get_secret_value(), api_base=config.api_base, gateway_url=config.gateway_url,
                          auto_thread=config.auto_thread, max_file_bytes=int(config.max_file_mb * 1024 * 1024))


SPEC = PlatformSpec("discord", DiscordConfig, create, env={"DISCORD_BOT_TOKEN": "token"},
                    install="chatgate[discord]", sdk=("discord",),
                    probe="platforms.discord.probe:probe", address="api_base")
