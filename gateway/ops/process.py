"""The gateway process's own protection: its memory and environment are not for its children."""

from __future__ import annotations

import ctypes
import ctypes.util
import logging

log = logging.getLogger(__name__)

PR_SET_DUMPABLE = 4
PR_GET_DUMPABLE = 3


def _prctl(option: int, value: int = 0) -> int:
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    return int(libc.prctl(option, value, 0, 0, 0))


def not_dumpable() -> bool:
    """Make this process not dumpable: a command the agent runs as the same user can no longer read
    `/proc/<gateway>/environ` or `/proc/<gateway>/mem`, nor attach a debugger (the API keys and
    tokens live there). A user with CAP_SYS_PTRACE (root) still can: the sandbox hides /proc from
    commands as well. False where the call is not available (not Linux)."""
    try:
        if _prctl(PR_SET_DUMPABLE, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE) failed")
    except (OSError, AttributeError) as exc:
        log.warning("could not make the gateway process undumpable: %s", exc)
        return False
    return True


def dumpable() -> bool:
    return _prctl(PR_GET_DUMPABLE) == 1
