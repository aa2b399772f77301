"""What `chatgate setup` asks for Slack: the bot token and, for Socket Mode (the one mode setup writes:
it needs no public address), the app-level token."""

from __future__ import annotations

from platforms.setup import PlatformSetup, Secret, UserIds

SETUP = PlatformSetup(
    "slack", "Slack", order=3,
    token=Secret("bot_token", "Bot User OAuth Token (xoxb-…: https://api.slack.com/apps → your app → OAuth & "
                              "Permissions; make the app from deploy/slack-app-manifest.yaml)"),
    secrets=(Secret("app_token", "App-level token for Socket Mode (xapp-…: Basic Information → App-Level Tokens → "
                                 "Generate, scope connections:write)",
                    "--slack-app-token", "Slack's xapp- app-level token (Socket Mode)"),),
    fixed={"mode": "socket"},
    user_ids=UserIds(r"[UW][A-Z0-9]{2,20}", "U0123ABCD", "Slack: your profile picture → Profile → ⋮ → Copy member ID"))
