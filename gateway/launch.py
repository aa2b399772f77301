"""The `chatgate` command's entry point: the command line, with the cyclic garbage collector held
off while the process starts.

Starting the daemon makes some 90,000 objects that live as long as the process (modules,
classes, the configuration). Collecting while they are being made only walks them again and
again: 70 ms of the 0.8 s to ready in one measurement (gc.callbacks), a sixth of it in one full
collection. So the collector is off from the first import; `chatgate run` turns it on once the
platforms are polling (one full collection, then `gc.freeze()`: what start-up made is never
walked again, so later collections under load are shorter too), every other command as it
begins. `python -m gateway` is the same entry point.
"""

from __future__ import annotations

import gc
from typing import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    gc.disable()
    try:
        from gateway.cli import main as command

        return command(argv)
    finally:
        gc.enable()


def collector_on(*, started: bool) -> None:
    """Turn the collector back on. `started`: the daemon is up; collect once, then freeze what is
    left so that it is not walked again. A no-op when it is on already (not started from here)."""
    if gc.isenabled():
        return
    if started:
        gc.collect()
        gc.freeze()
    gc.enable()
