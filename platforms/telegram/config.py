"""`platforms.telegram` in config.yaml."""

from __future__ import annotations

from typing import Literal

from platforms.config import GroupChatConfig
from platforms.sections import Secret, setting


class TelegramConfig(GroupChatConfig):
    token: Secret | None = None
    base_url: str = "https://api.telegram.org"  # any Bot API server (self-hosted, or a test fake)
    mode: Literal["polling", "webhook"] = "polling"
    webhook_url: str | None = None  # the public URL Telegram calls, ending in /telegram/webhook
    webhook_secret: Secret | None = None  # default: derived from the token
    max_file_mb: float = setting(20.0, gt=0)
    poll_timeout: int = setting(30, ge=0, le=600)
    max_sends_per_second: float = setting(0.0, ge=0)  # 0: none; Telegram's own 429s are honoured per chat either way

    def validate(self) -> None:
        """Webhook mode has its public URL."""
        if self.mode == "webhook" and not self.webhook_url:
            raise ValueError("mode webhook needs platforms.telegram.webhook_url (the public https URL)")

    @property
    def configured(self) -> bool:
        return self.token is not None and bool(self.token.get_secret_value())

    @property
    def enabled(self) -> bool:
        return self.configured
