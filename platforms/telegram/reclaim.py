"""Finding a message of the bot's whose id chatgate never learned (`PlatformAdapter.reclaim`).

The Bot API has no idempotency key and no way to read a chat's history, but a bot can edit only its
own messages, and message ids grow. So the message a send made after message X is among the ids
after X that chatgate has not recorded (its own or people's): each is edited, in order, to a
placeholder (`PLACEHOLDERS`). Telegram refuses an id that is not the bot's ("message can't be edited")
or not there ("message to edit not found": deleted, not made yet, or, in private chats and basic
groups, whose numbers can run across several chats, another chat's); an edit it accepts answers with
the message, and one that is where the send put it (`belongs`: its forum topic, the message it replies
to) is the message — another send's, interrupted too (another topic's, or another person's answer in
a group), shows the placeholder, never this one's answer, until its own send finds it. At most
`PROBES` ids are tried; when none is it, the caller sends anew and the log says so.

While it looks in a chat, no send of this adapter to that chat is on its way (`SendGate`): a message
that landed and whose answer is not back yet would be one of the candidates.
"""

from __future__ import annotations

import asyncio
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator, Awaitable, Callable

from platforms.base import DeliveryError

PROBES = 30  # ids tried at most (each an editMessageText); a busy group may have more between
PLACEHOLDERS = ("…", "⋯")  # (the second where a candidate shows the first already: an edit must change it)
_NOT_IT = ("message can't be edited", "message to edit not found", "there is no text in the message to edit",
           "message_id_invalid")
Mark = Callable[[str, str], Awaitable[dict[str, Any]]]  # (message id, text) → the message, edited to that text


async def find_own(mark: Mark, after: int, skip: set[str], thread_id: str | None, reply_to: str | None) -> str | None:
    """The first id after `after`, not in `skip`, that `mark` succeeds on and whose message `belongs` where a
    send to `thread_id` replying to `reply_to` puts it; None after `PROBES` tries. An error that is not a
    refusal (the network, a rate limit) is raised: the search is tried again."""
    candidate, tried = after, 0
    while tried < PROBES:
        candidate += 1
        if str(candidate) in skip:
            continue
        tried += 1
        try:
            message = await _marked(mark, str(candidate))
        except DeliveryError as exc:
            if exc.retryable or not any(refusal in str(exc).lower() for refusal in _NOT_IT):
                raise
            continue
        if belongs(message, thread_id, reply_to):
            return str(candidate)
    return None


async def _marked(mark: Mark, candidate: str) -> dict[str, Any]:
    try:
        return await mark(candidate, PLACEHOLDERS[0])
    except DeliveryError as exc:
        if "message is not modified" not in str(exc).lower():
            raise
    return await mark(candidate, PLACEHOLDERS[1])


def belongs(message: dict[str, Any], thread_id: str | None, reply_to: str | None) -> bool:
    """Whether a message of the bot's is where a send to `thread_id` replying to `reply_to` put it: in that
    forum topic (None: the General topic, or a chat without topics), replying to that message, or to none
    (it was gone: sent without it), or to its topic's first message (what a topic's messages reply to)."""
    topic = message.get("message_thread_id") if message.get("is_topic_message") else None
    if (str(topic) if topic else None) != thread_id:
        return False
    replied = (message.get("reply_to_message") or {}).get("message_id")
    return replied in (None, topic) or str(replied) == reply_to


class SendGate:
    """The sends on their way per chat, and a search (`alone`) that waits for them to land and holds new
    ones back until it is done."""

    def __init__(self) -> None:
        self._flying: dict[str, int] = {}
        self._searching: dict[str, asyncio.Event] = {}  # chat → set when its search is over
        self._landed: dict[str, asyncio.Event] = {}  # chat → set when its sends on their way have landed

    async def _no_search(self, chat_id: str) -> None:
        while (search := self._searching.get(chat_id)) is not None:
            await search.wait()

    @asynccontextmanager
    async def sending(self, chat_id: str) -> AsyncIterator[None]:
        await self._no_search(chat_id)
        self._flying[chat_id] = self._flying.get(chat_id, 0) + 1
        try:
            yield
        finally:
            self._flying[chat_id] -= 1
            if not self._flying[chat_id]:
                del self._flying[chat_id]
                landed = self._landed.pop(chat_id, None)
                if landed is not None:
                    landed.set()

    @asynccontextmanager
    async def alone(self, chat_id: str) -> AsyncIterator[None]:
        await self._no_search(chat_id)
        over = self._searching[chat_id] = asyncio.Event()
        try:
            if self._flying.get(chat_id):
                await self._landed.setdefault(chat_id, asyncio.Event()).wait()
            yield
        finally:
            del self._searching[chat_id]
            over.set()
