"""The gateway process: its memory and environment are not for its children, and it is the only
daemon on its home."""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import fcntl
import logging
import os
import stat
import time
from pathlib import Path

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


# -- one daemon per home ------------------------------------------------------------------------

LOCK_NAME = "chatgate.pid"  # in CHATGATE_HOME: locked by the running daemon, which wrote its pid into it
EXIT_HOME_IN_USE = 75  # `chatgate run` beside another daemon (EX_TEMPFAIL; the unit does not restart on it)
_LOCK_TRIES = 20  # × 25 ms: a `chatgate status` looking at the lock holds it for an instant


class HomeInUse(RuntimeError):
    """Another chatgate daemon runs on this home."""

    def __init__(self, home: Path, pid: int | None) -> None:
        who = f"pid {pid}" if pid else "its pid unknown"
        super().__init__(f"another chatgate is running on {home} ({who}): stop it first (`chatgate status` shows "
                         "it), or give this one a CHATGATE_HOME of its own")
        self.pid = pid


def _pid_in(fd: int) -> int | None:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


class HomeLock:
    """The daemon's hold on its home: an exclusive `flock` on `LOCK_NAME`, held while the process
    lives (the kernel lets go when it exits, even at kill -9; the descriptor is not inherited by the
    commands it runs), with the pid written inside for `chatgate status`."""

    def __init__(self, fd: int) -> None:
        self._fd: int | None = fd

    @classmethod
    def take(cls, home: Path) -> "HomeLock":
        """Hold `home`, or raise `HomeInUse` naming the daemon that does (OSError: cannot open it)."""
        home.mkdir(mode=0o700, parents=True, exist_ok=True)
        # never through a link: the file is truncated and written, so a link (or a hard link) to another
        # file planted in the home would have the daemon — perhaps root — overwrite that file
        fd = os.open(home / LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1 or info.st_uid != os.geteuid():
                raise OSError(errno.EPERM, "not a regular file of this user's with no other name",
                              str(home / LOCK_NAME))
            for attempt in range(_LOCK_TRIES):
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if attempt == _LOCK_TRIES - 1:
                        raise HomeInUse(home, _pid_in(fd)) from None
                    time.sleep(0.025)
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        except BaseException:
            os.close(fd)
            raise
        return cls(fd)

    def release(self) -> None:
        """Let go (the file stays: removing it would race with the next daemon opening it)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def daemon_pid(home: Path) -> int | None:
    """The pid of the daemon holding `home` (0: one does, its pid not readable), None when none does."""
    try:
        fd = os.open(home / LOCK_NAME, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _pid_in(fd) or 0
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)
