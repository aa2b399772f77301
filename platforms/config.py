"""What every platform's configuration section has in common (each platform adds its own keys)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, SecretStr


class Section(BaseModel):
    """A config section (pydantic): unknown keys are errors; numbers are welcome where text is
    expected (`token: 123456`, Telegram's numeric chat ids as keys)."""

    model_config = ConfigDict(extra="forbid", coerce_numbers_to_str=True, defer_build=True)


def section() -> Any:
    """The default of a field that holds a section: its keys' defaults, checked by the enclosing
    model's validator (so that a section's model is not built on its own as well; see defer_build)."""
    return Field(default_factory=dict, validate_default=True)


def is_set(secret: SecretStr | None) -> bool:
    return secret is not None and bool(secret.get_secret_value())


class PlatformConfig(Section):
    """`platforms.<name>`. A platform is started when `configured` (usually: its token is set)."""

    @property
    def configured(self) -> bool:
        return False

    def wanted(self, others: bool) -> bool:
        """Whether to start this platform; `others` says whether any other platform is configured."""
        return self.configured

    def require_mention_in(self, chat_id: str) -> bool:
        """Whether the bot answers in this group chat only when addressed."""
        return True


class ChatOverrides(Section):
    require_mention: bool | None = None


class GroupChatConfig(PlatformConfig):
    """A platform with group chats: mention gating, with overrides per chat id."""

    require_mention: bool = True  # in groups, answer only when addressed
    chats: dict[str, ChatOverrides] = {}  # per chat id, e.g. {"-100123": {"require_mention": false}}

    def require_mention_in(self, chat_id: str) -> bool:
        override = self.chats[chat_id].require_mention if chat_id in self.chats else None
        return override if override is not None else self.require_mention
