"""The registry's entry for the web chat (`SPEC`): its config model, the variables that fill it and the factory
that imports its adapter only when it is configured."""

from __future__ import annotations

from typing import TYPE_CHECKING

from platforms.registry import AdapterEnv, PlatformSpec
from platforms.webchat.config import WebchatConfig

if TYPE_CHECKING:
    from platforms.webchat.adapter import WebChatAdapter


def create(config: WebchatConfig, env: AdapterEnv) -> "WebChatAdapter":
    from platforms.webchat.access import Gate, resolve_token
    from platforms.webchat.adapter import WebChatAdapter

    token = resolve_token(config.token.get_secret_value() if config.token is not None else None, env.home,
                          env.http_host)
    return WebChatAdapter(gate=Gate(env.http_host, env.public_url, token), ack_timeout=config.ack_timeout_seconds,
                          max_chars=env.max_message_chars)


SPEC = PlatformSpec("webchat", WebchatConfig, create)
