"""The rules of sessions: which session a message belongs to, and whose it is."""

from __future__ import annotations

from platforms.base import InboundMessage


def session_key(msg: InboundMessage, group_sessions: str = "per_user") -> str:
    """A thread or topic is one session shared by its participants; a DM is one session per
    chat; in a group each user has their own session unless `group_sessions` is ``"shared"``."""
    base = f"{msg.platform}:{msg.chat_id}"
    if msg.thread_id:
        return f"{base}:thread:{msg.thread_id}"
    if msg.chat_type == "dm" or group_sessions == "shared":
        return base
    return f"{base}:user:{msg.user_id}"


def personal_session(key: str, chat_type: str, user_id: str) -> bool:
    """A session only this person takes part in (their profile may enter its prompt)."""
    return chat_type == "dm" or key.endswith(f":user:{user_id}")
