"""`platforms.slack` in config.yaml."""

from __future__ import annotations

from typing import Literal

from platforms.config import ChatOverrides, PlatformConfig
from platforms.sections import Secret, setting


def _set(secret: Secret | None) -> bool:
    return secret is not None and bool(secret.get_secret_value())


class SlackConfig(PlatformConfig):
    mode: Literal["socket", "http"] = "socket"  # socket: needs app_token; http: needs signing_secret
    bot_token: Secret | None = None  # xoxb-…
    app_token: Secret | None = None  # xapp-… (Socket Mode)
    signing_secret: Secret | None = None  # HTTP mode: events arrive signed at POST /slack/events
    api_base: str = "https://slack.com/api/"  # Web API; another value points at a proxy or a test fake
    require_mention: bool = True  # in channels, a conversation starts with a mention
    channels: dict[str, ChatOverrides] = {}  # per channel id, e.g. {"C0123": {"require_mention": false}}
    allow_bots: bool = False  # answer other bots' messages too (never its own)
    assistant: bool = False  # the app is a Slack AI assistant: show "is thinking…" in its threads
    max_file_mb: float = setting(20.0, gt=0)

    def validate(self) -> None:
        """The token the chosen mode needs is there."""
        if not self.configured:
            return
        if self.mode == "socket" and not _set(self.app_token):
            raise ValueError("mode socket needs platforms.slack.app_token (SLACK_APP_TOKEN, xapp-…: Basic "
                             "Information → App-Level Tokens, scope connections:write), or set mode: http")
        if self.mode == "http" and not _set(self.signing_secret):
            raise ValueError("mode http needs platforms.slack.signing_secret (SLACK_SIGNING_SECRET: Basic "
                             "Information → App Credentials → Signing Secret)")

    @property
    def configured(self) -> bool:
        return _set(self.bot_token)

    def require_mention_in(self, chat_id: str) -> bool:
        override = self.channels[chat_id].require_mention if chat_id in self.channels else None
        return override if override is not None else self.require_mention
