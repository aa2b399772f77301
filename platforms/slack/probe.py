"""Whether Slack takes the tokens: auth.test with the bot token and, in Socket Mode,
apps.connections.open with the app-level token (the check Slack documents for an `xapp-` token),
through slack_sdk (`chatgate doctor`, `setup`)."""

from __future__ import annotations

import math

from platforms.base import PlatformRefused
from platforms.slack.config import SlackConfig

BOT_FIX = "copy the Bot User OAuth Token (xoxb-…) at https://api.slack.com/apps → your app → OAuth & " \
          "Permissions (reinstall the app if it was revoked) and set platforms.slack.bot_token (or SLACK_BOT_TOKEN)"
APP_FIX = "generate an app-level token (xapp-…, scope connections:write) at https://api.slack.com/apps → your " \
          "app → Basic Information → App-Level Tokens and set platforms.slack.app_token (or SLACK_APP_TOKEN)"
REFUSALS = {"invalid_auth", "not_authed", "account_inactive", "token_revoked", "token_expired",
            "not_allowed_token_type", "missing_scope"}


def _secret(value) -> str:  # type: ignore[no-untyped-def]
    return value.get_secret_value() if value is not None else ""


async def probe(section: SlackConfig, timeout: float) -> tuple[str, str | None]:
    """(who the bot is, its user name); `PlatformRefused` when Slack refuses a token."""
    from slack_sdk.errors import SlackApiError
    from slack_sdk.web.async_client import AsyncWebClient

    client = AsyncWebClient(token=_secret(section.bot_token), base_url=section.api_base, timeout=math.ceil(timeout))
    token, fix = "bot token", BOT_FIX
    try:
        me = await client.auth_test()
        if section.mode == "socket":
            token, fix = "app-level token", APP_FIX
            await client.apps_connections_open(app_token=_secret(section.app_token))
    except SlackApiError as exc:
        error = exc.response.get("error") if exc.response is not None else None
        if error in REFUSALS:
            raise PlatformRefused(f"Slack refused the {token} ({error}) — {fix}") from None
        raise RuntimeError(f"Slack answered {error or exc.response.status_code}") from None
    return f"{me.get('user')} in {me.get('team')} (bot user {me.get('user_id')})", me.get("user")
