"""Rate limits as a platform states them: a pause per chat after a 429, and an optional overall rate.

One chat's 429 pauses that chat only. (python-telegram-bot's `AIORateLimiter` halts every
request of the bot on any `RetryAfter`, which is the behaviour this replaces.) The overall rate,
when set, is a token bucket that sends wait on briefly; a paused chat is not waited on here: the
caller gets the time left and decides (the outbox retries that chat later, previews skip an edit).
"""

from __future__ import annotations

import asyncio
import time
from typing import Callable


class RateLimits:
    def __init__(self, per_second: float = 0.0, burst: int | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.rate = per_second  # 0: no overall rate, only the pauses the platform asks for
        self.capacity = float(burst if burst is not None else max(1, int(per_second)))
        self._tokens = self.capacity
        self._refilled = clock()
        self._clock = clock
        self._paused: dict[str, float] = {}  # chat → until (clock time)

    def paused_for(self, chat: str) -> float:
        """Seconds this chat is still paused (0 when it is not)."""
        until = self._paused.get(chat)
        if until is None:
            return 0.0
        left = until - self._clock()
        if left <= 0:
            del self._paused[chat]
            return 0.0
        return left

    def pause(self, chat: str, seconds: float) -> None:
        self._paused[chat] = max(self._paused.get(chat, 0.0), self._clock() + seconds)

    def _refill(self) -> None:
        now = self._clock()
        self._tokens = min(self.capacity, self._tokens + (now - self._refilled) * self.rate)
        self._refilled = now

    def try_take(self) -> bool:
        """A slot of the overall rate if one is free now (True), without waiting."""
        if self.rate <= 0:
            return True
        self._refill()
        if self._tokens < 1.0:
            return False
        self._tokens -= 1.0
        return True

    async def take(self) -> None:
        """Wait for a slot of the overall rate."""
        while not self.try_take():
            await asyncio.sleep((1.0 - self._tokens) / self.rate)
