"""Turning the cyclic garbage collector back on after start-up (`gateway.cli.launch` holds it off).

The daemon then collects the youngest generation after 50,000 more container objects instead of
700. A turn in flight holds its objects for as long as the model takes; with a thousand turns
in flight, the collections walked them all again and again, and took a seventh of the daemon's
CPU on the 1,000-conversation benchmark (gc.callbacks: 553 ms of 3.83 s).
At 50,000 they took about 90 ms, the CPU per message fell by about a third, and the peak RSS rose
by 1-2 MB (garbage in cycles waits longer before it is found).
"""

from __future__ import annotations

import gc

YOUNG_THRESHOLD = 50_000  # new container objects between collections of the youngest generation (CPython: 700)


def collector_on(*, started: bool) -> None:
    """Turn the collector back on. `started`: the daemon is up; collect once, then freeze what is
    left so that it is not walked again. A no-op when it is on already (not started from here)."""
    if gc.isenabled():
        return
    if started:
        gc.collect()
        gc.freeze()
        gc.set_threshold(YOUNG_THRESHOLD, *gc.get_threshold()[1:])
    gc.enable()
