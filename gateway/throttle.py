"""How often the same notice may be said: once per key per window (a flood gets one answer, not one each)."""

from __future__ import annotations

import time
from collections import OrderedDict
from typing import Callable, Hashable


class Throttle:
    """Remembers when each key was last let through; keys older than the window are forgotten, so
    memory follows the keys of the last window only."""

    def __init__(self, window: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.window = window
        self._clock = clock
        self._last: OrderedDict[Hashable, float] = OrderedDict()  # oldest first

    def allow(self, key: Hashable) -> bool:
        """True when `key` was not let through within the window (and it is now)."""
        now = self._clock()
        while self._last:
            oldest, at = next(iter(self._last.items()))
            if now - at < self.window:
                break
            del self._last[oldest]
        if key in self._last:
            return False
        self._last[key] = now
        return True
