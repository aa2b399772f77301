"""The registry's entry for Telegram (`SPEC`): its config model, the variables that fill it and the factory
that imports its adapter only when it is configured."""

from __future__ import annotations

from typing import TYPE_CHECKING

from platforms.registry import AdapterEnv, PlatformSpec
from platforms.telegram.config import TelegramConfig

if TYPE_CHECKING:
    from platforms.telegram.adapter import TelegramAdapter


def create(config: TelegramConfig, env: AdapterEnv) -> "TelegramAdapter":
    from platforms.telegram.adapter import TelegramAdapter  # (python-telegram-bot: not installed is one line)

    assert config.token is not None
    return TelegramAdapter(
        config.token.get_secret_value(), base_url=config.base_url, mode=config.mode, webhook_url=config.webhook_url,
        webhook_secret=config.webhook_secret.get_secret_value() if config.webhook_secret else None,
        max_file_bytes=int(config.max_file_mb * 1024 * 1024),
        poll_timeout=config.poll_timeout, max_sends_per_second=config.max_sends_per_second)


SPEC = PlatformSpec("telegram", TelegramConfig, create, env={"TELEGRAM_BOT_TOKEN": "token"},
                    install="chatgate[telegram]", sdk=("telegram", "markdown_it", "httpx"),
                    probe="platforms.telegram.probe:probe")
