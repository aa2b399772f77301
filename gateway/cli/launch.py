"""The `chatgate` command's entry point: the command line, with the cyclic garbage collector held
off while the process starts (from here on: what the package imports before, the parsers, is light).

Starting the daemon makes some 60,000 objects that live as long as the process (modules,
classes, the configuration). Collecting while they are being made only walks them again and
again: 70 ms of the 0.8 s to ready in one measurement (gc.callbacks), half of it in one full
collection. So the collector is off from the first import; `chatgate run` turns it on once the
platforms are polling (one full collection, then `gc.freeze()`: what start-up made is never
walked again, so later collections under load are shorter too), every other command as it
begins (`gateway.ops.collector`). `python -m gateway` and `python -m gateway.cli` are the same entry point.

frozenlist (aiohttp's lists of signal handlers, none of them on a hot path) is taken in its pure
Python form: its compiled form links the C++ runtime, 1.2 MB of the idle daemon's 50.7 MB.
"""

from __future__ import annotations

import gc
import os
from typing import Sequence


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
