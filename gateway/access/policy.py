"""Who may talk to the agent: one decision for every platform."""

from __future__ import annotations

from typing import Collection, Literal

from gateway.config import AccessConfig
from platforms.base import InboundMessage

Decision = Literal["allow", "ignore", "pair"]

def is_admin(access: AccessConfig, platform: str, user_id: str) -> bool:
    return user_id in access.admins.get(platform, ())


def check_access(msg: InboundMessage, access: AccessConfig, *, local: Collection[str], paired: bool = False,
                 require_mention: bool = True) -> Decision:
    """allow it, ignore it silently, or start pairing (unknown user in a DM).

    `local`: the platforms whose adapter declares a local, already-authenticated surface
    (`Capabilities.local`): everyone on them is allowed.
    `paired` says the user was admitted with `chatgate pair approve`; `require_mention` whether
    this group needs the bot to be addressed (mention, reply to the bot, or a command).
    """
    if msg.platform in local:
        return "allow"
    known = paired or msg.user_id in access.allowed_users.get(msg.platform, ()) \
        or is_admin(access, msg.platform, msg.user_id)
    if msg.chat_type != "dm" and require_mention and not msg.bot_mentioned:
        return "ignore"
    if known or access.dm_policy == "open":
        return "allow"
    if msg.chat_type == "dm" and access.dm_policy == "pairing":
        return "pair"
    return "ignore"
