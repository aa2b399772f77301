"""What `chatgate setup` asks for the web chat: nothing. It is local, so it has no token, and everyone
on it is admin; setup only switches it on."""

from __future__ import annotations

from platforms.setup import PlatformSetup

SETUP = PlatformSetup("webchat", "web chat", order=4, fixed={"enabled": True},
                      then="open the link it prints")
