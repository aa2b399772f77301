"""The registry's entry for Slack (`SPEC`): its config model, the variables that fill it and the factory
that imports its adapter only when it is configured."""

from __future__ import annotations

from typing import TYPE_CHECKING

from platforms.registry import AdapterEnv, PlatformSpec
from platforms.slack.config import SlackConfig

if TYPE_CHECKING:
    from platforms.slack.adapter import SlackAdapter


def _secret(value: object) -> str | None:
    return value.get_secret_value() if value is not None else None  # type: ignore[attr-defined]


def create(config: SlackConfig, env: AdapterEnv) -> "SlackAdapter":
    from platforms.slack.adapter import SlackAdapter

    return SlackAdapter(_secret(config.bot_token) or "", mode=config.mode, app_token=_secret(config.app_token),
                        signing_secret=_secret(config.signing_secret), api_base=config.api_base,
                        allow_bots=config.allow_bots, assistant=config.assistant,
                        max_file_bytes=int(config.max_file_mb * 1024 * 1024))


SPEC = PlatformSpec("slack", SlackConfig, create,
                    env={"SLACK_BOT_TOKEN": "bot_token", "SLACK_APP_TOKEN": "app_token",
                         "SLACK_SIGNING_SECRET": "signing_secret"},
                    install="chatgate[slack]", sdk=("slack_bolt", "slack_sdk", "markdown_it"),
                    probe="platforms.slack.probe:probe", address="api_base")
