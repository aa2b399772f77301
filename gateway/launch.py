"""The `chatgate` command's entry point: the command line, with the cyclic garbage collector held
off while the process starts.

Starting the daemon makes some 60,000 objects that live as long as the process (modules,
classes, the configuration). Collecting while they are being made only walks them again and
again: 70 ms of the 0.8 s to ready in one measurement (gc.callbacks), half of it in one full
collection. So the collector is off from the first import; `chatgate run` turns it on once the
platforms are polling (one full collection, then `gc.freeze()`: what start-up made is never
walked again, so later collections under load are shorter too), every other command as it
begins. `python -m gateway` is the same entry point.

The daemon then collects the youngest generation after 50,000 more container objects instead of
700. A turn in flight holds its objects for as long as the model takes; with a thousand turns
in flight, the collections walked them all again and again, and took a seventh of the daemon's
CPU on the 1,000-conversation benchmark (gc.callbacks: 553 ms of 3.83 s).
At 50,000 they took about 90 ms, the CPU per message fell by about a third, and the peak RSS rose
by 1-2 MB (garbage in cycles waits longer before it is found).

frozenlist (aiohttp's lists of signal handlers, none of them on a hot path) is taken in its pure
Python form: its compiled form links the C++ runtime, 1.2 MB of the idle daemon's 50.7 MB.
"""

from __future__ import annotations

import gc
import os
from typing import Sequence

YOUNG_THRESHOLD = 50_000  # new container objects between collections of the youngest generation (CPython: 700)


def main(argv: Sequence[str] | None = None) -> int:
    gc.disable()
    _pure_python_frozenlist()
    try:
        from gateway.cli import main as command

        return command(argv)
    finally:
        gc.enable()


def _pure_python_frozenlist() -> None:
    """Import frozenlist without its C++ extension (its own switch, read at import); the variable
    is not left behind for the commands the agent runs."""
    if "FROZENLIST_NO_EXTENSIONS" in os.environ:  # the operator's choice
        return
    os.environ["FROZENLIST_NO_EXTENSIONS"] = "1"
    try:
        import frozenlist  # noqa: F401
    except ImportError:
        pass
    finally:
        del os.environ["FROZENLIST_NO_EXTENSIONS"]


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
