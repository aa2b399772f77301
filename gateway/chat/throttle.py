"""How often the same thing may happen per key: `times` per window (a notice once, so a flood gets one answer,
not one each; a person's chat commands a few dozen a minute)."""

from __future__ import annotations

import time
from collections import OrderedDict, deque
from typing import Callable, Hashable


class Throttle:
    """Remembers when each key was let through within the window; a key with nothing in the window is
    forgotten, so memory follows the keys of the last window only."""

    def __init__(self, window: float, clock: Callable[[], float] = time.monotonic, *, times: int = 1) -> None:
        self.window = window
        self.times = times
        self._clock = clock
        self._last: OrderedDict[Hashable, deque[float]] = OrderedDict()  # least recently let through first

    def allow(self, key: Hashable) -> bool:
        """True when `key` was let through fewer than `times` times within the window (and it is now)."""
        now = self._clock()
        while self._last:
            oldest, at = next(iter(self._last.items()))
            if now - at[-1] < self.window:
                break
            del self._last[oldest]
        seen = self._last.setdefault(key, deque(maxlen=self.times))  # its latest `times`, oldest first
        if len(seen) == self.times and now - seen[0] < self.window:
            return False
        seen.append(now)
        self._last.move_to_end(key)
        return True
