"""Which messages intake does not take, and which refusals and answers it leaves unsaid: the length limit, a
person's commands per minute, the waiting limits per person and per conversation, and a notice said at most
once a minute per key (a flood gets one answer, not one each)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gateway.chat.session_key import personal_session
from gateway.chat.throttle import Throttle
from platforms.base import InboundMessage

if TYPE_CHECKING:
    from gateway.chat.commands import Command
    from gateway.chat.sessions import Sessions
    from gateway.config import GatewayConfig

NOTICE_EVERY = 60.0  # seconds: a full queue is said once in this long per person (or conversation)


class Refusals:
    def __init__(self, limits: "GatewayConfig", local: frozenset[str], sessions: "Sessions") -> None:
        self.limits, self.local, self.sessions = limits, local, sessions
        self.told = Throttle(NOTICE_EVERY)  # who was told of a full queue lately (a flood gets one notice)
        # a person's chat commands in one chat (its threads and topics too: a member opens as many as they like)
        self.command_limit = Throttle(60.0, times=limits.max_commands_per_minute)
        # and their unthrottled ones (/stop, /approve, /deny) and bare yes/no there: always done, but beyond as
        # many a minute, one that does nothing (nothing running, nothing waiting, not theirs to decide) is not answered
        self.answer_limit = Throttle(60.0, times=limits.max_commands_per_minute)

    def refusal(self, msg: InboundMessage, key: str,
                command: "Command | None") -> tuple[str, str, tuple[str, ...] | None] | None:
        """(reason, what to tell, and a key when that notice is said at most once a minute per key) when a
        message is not to be taken. The waiting limit is per person, so one member of a shared
        conversation cannot fill it for the others; all of them together have a larger one."""
        limits, sessions = self.limits, self.sessions
        if len(msg.text) > limits.max_message_chars:
            return "too_long", (f"⚠️ Your message is {len(msg.text):,} characters long; the limit is "
                                f"{limits.max_message_chars:,}. It was not passed on — send it shorter, or as a file."
                                ), None
        if command is not None and command.immediate:  # /stop, /status … skip the queue: never refused for it,
            if not command.throttled or msg.platform in self.local or self.command_limit.allow(_in_chat(msg)):
                return None  # but a person's commands are answered a few dozen a minute, not without end
            return "too_many_commands", (f"⚠️ You sent more than {limits.max_commands_per_minute} commands in a "
                                         "minute here; the others go unanswered for now (I say this at most once a "
                                         "minute). /stop still works."), _in_chat(msg)
        later = "nor are more until I get to them (I say this at most once a minute). Send it again then"
        mine = limits.max_waiting_messages
        if sessions.waiting(key, msg.user_id) >= mine:  # (a reply to their message: "your" is theirs)
            stop = " (or /stop the running request)" if personal_session(key, msg.chat_type, msg.user_id) else ""
            return "too_many_waiting", (f"⚠️ {mine} of your messages are already waiting here, so this one was not "
                                        f"taken, {later}{stop}."), (key, msg.user_id)
        everyone = limits.max_waiting_per_conversation
        if sessions.waiting(key) >= everyone:
            return "conversation_full", (f"⚠️ {everyone} messages are already waiting in this conversation, so this "
                                         f"one was not taken, {later}."), (key,)
        return None

    def tell(self, reason: str, notice_key: tuple[str, ...] | None) -> bool:
        """Whether a refusal is said: always without a key; with one, when that key was not told within the
        last minute."""
        return notice_key is None or self.told.allow((reason, *notice_key))

    def over_answers(self, msg: InboundMessage) -> bool:
        """This person sent more /stop, /approve, /deny (or bare yes/no) in this chat this minute than
        `gateway.max_commands_per_minute`: one that does nothing goes unanswered (the web chat: never)."""
        return msg.platform not in self.local and not self.answer_limit.allow(_in_chat(msg))


def _in_chat(msg: InboundMessage) -> tuple[str, str, str]:
    """Whose commands where: a person in a chat, whatever its threads or topics (the key of the limits)."""
    return msg.platform, msg.chat_id, msg.user_id
