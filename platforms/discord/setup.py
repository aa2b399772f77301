"""What `chatgate setup` asks for Discord."""

from __future__ import annotations

from platforms.setup import PlatformSetup, Secret, UserIds

SETUP = PlatformSetup(
    "discord", "Discord", order=2,
    token=Secret("token", "Bot token (https://discord.com/developers/applications → your app → Bot → Reset Token; "
                          "switch on Message Content Intent there too)"),
    user_ids=UserIds(r"[0-9]{15,21}", "123456789012345678",
                     "Discord: Settings → Advanced → Developer Mode on, then right-click your name → Copy User ID"))
