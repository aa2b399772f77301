"""`platforms.telegram` in config.yaml."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, SecretStr, model_validator

from platforms.config import GroupChatConfig, is_set


class TelegramConfig(GroupChatConfig):
    token: SecretStr | None = None
    base_url: str = "https://api.telegram.org"  # any Bot API server (self-hosted, or a test fake)
    mode: Literal["polling", "webhook"] = "polling"
    webhook_url: str | None = None  # the public URL Telegram calls, ending in /telegram/webhook
    webhook_secret: SecretStr | None = None  # default: derived from the token
    max_file_mb: float = Field(20.0, gt=0)
    poll_timeout: int = Field(30, ge=0, le=600)
    max_sends_per_second: float = Field(0.0, ge=0)  # 0: none; Telegram's own 429s are honoured per chat either way

    @model_validator(mode="after")
    def _webhook_has_its_url(self) -> TelegramConfig:
        """Webhook mode has its public URL."""
        if self.mode == "webhook" and not self.webhook_url:
            raise ValueError("mode webhook needs platforms.telegram.webhook_url (the public https URL)")
        return self

    @property
    def configured(self) -> bool:
        return is_set(self.token)

    @property
    def enabled(self) -> bool:
        return self.configured
