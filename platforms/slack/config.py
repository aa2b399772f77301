"""`platforms.slack` in config.yaml."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, SecretStr, model_validator

from platforms.config import ChatOverrides, PlatformConfig, is_set


class SlackConfig(PlatformConfig):
    mode: Literal["socket", "http"] = "socket"  # socket: needs app_token; http: needs signing_secret
    bot_token: SecretStr | None = None  # xoxb-…
    app_token: SecretStr | None = None  # xapp-… (Socket Mode)
    signing_secret: SecretStr | None = None  # HTTP mode: events arrive signed at POST /slack/events
    api_base: str = "https://slack.com/api/"  # Web API; another value points at a proxy or a test fake
    require_mention: bool = True  # in channels, a conversation starts with a mention
    channels: dict[str, ChatOverrides] = {}  # per channel id, e.g. {"C0123": {"require_mention": false}}
    allow_bots: bool = False  # answer other bots' messages too (never its own)
    assistant: bool = False  # the app is a Slack AI assistant: show "is thinking…" in its threads
    max_file_mb: float = Field(20.0, gt=0)

    @model_validator(mode="after")
    def _mode_has_its_token(self) -> SlackConfig:
        """The token the chosen mode needs is there."""
        if not self.configured:
            return self
        if self.mode == "socket" and not is_set(self.app_token):
            raise ValueError("mode socket needs platforms.slack.app_token (SLACK_APP_TOKEN, xapp-…: Basic "
                             "Information → App-Level Tokens, scope connections:write), or set mode: http")
        if self.mode == "http" and not is_set(self.signing_secret):
            raise ValueError("mode http needs platforms.slack.signing_secret (SLACK_SIGNING_SECRET: Basic "
                             "Information → App Credentials → Signing Secret)")
        return self

    @property
    def configured(self) -> bool:
        return is_set(self.bot_token)

    def require_mention_in(self, chat_id: str) -> bool:
        override = self.channels[chat_id].require_mention if chat_id in self.channels else None
        return override if override is not None else self.require_mention
