"""`platforms.discord` in config.yaml."""

from __future__ import annotations

from pydantic import Field, SecretStr

from platforms.config import ChatOverrides, PlatformConfig, is_set


class DiscordConfig(PlatformConfig):
    token: SecretStr | None = None
    api_base: str = "https://discord.com/api/v10"  # REST; another value points at a proxy or a test fake
    gateway_url: str | None = None  # the gateway websocket; None: Discord's own
    require_mention: bool = True  # in server channels, answer only when mentioned (or replied to)
    channels: dict[str, ChatOverrides] = {}  # per channel id, e.g. {"1234": {"require_mention": false}}
    auto_thread: bool = False  # a mention in a channel opens a thread, and the conversation goes on there
    max_file_mb: float = Field(25.0, gt=0)

    @property
    def configured(self) -> bool:
        return is_set(self.token)

    def require_mention_in(self, chat_id: str) -> bool:
        override = self.channels[chat_id].require_mention if chat_id in self.channels else None
        return override if override is not None else self.require_mention
