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
from collections.abc import Mapping
from pathlib import Path
from typing import Callable

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

def home_from_env(env: Mapping[str, str] | None = None) -> Path:
    """`$CHATGATE_HOME`, else ~/.chatgate: the home of every command (`gateway.config` reads it here
    too, so that commands that read no configuration need none of its libraries)."""
    env = os.environ if env is None else env
    return Path(env.get("CHATGATE_HOME") or "~/.chatgate").expanduser()


LOCK_NAME = "chatgate.pid"  # in CHATGATE_HOME: the running daemon's pid, for `chatgate status`
EXIT_HOME_IN_USE = 75  # `chatgate run` beside another daemon (EX_TEMPFAIL; the unit does not restart on it)
# every platform refused chatgate for good (a revoked token, a missing intent): EX_CONFIG — restarting
# cannot help until the configuration changes, so a unit should not restart on it either
EXIT_REFUSED = 78
_LOCK_TRIES = 20  # × 25 ms: a `chatgate status` looking at a lock holds it for an instant
_FOLDER = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC


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


def _holder(path: Path, flags: int, is_kind: Callable[[int], bool]) -> int | None:
    """The pid written in `path` while a daemon holds it locked (0: held, no pid in it — the home folder);
    None when nobody does (or it cannot be opened or locked here, or is not of the kind `is_kind` takes:
    opened without waiting, so a FIFO planted there does not hold the reader up)."""
    try:
        fd = os.open(path, flags | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        if not is_kind(os.fstat(fd).st_mode):
            return None
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)  # (let go of again as the descriptor closes)
    except BlockingIOError:
        return _pid_in(fd) or 0
    except OSError:
        return None
    finally:
        os.close(fd)
    return None


def _lock(fd: int, home: Path) -> None:
    """An exclusive `flock` on `fd`, or `HomeInUse` (OSError: this file system cannot lock it)."""
    for attempt in range(_LOCK_TRIES):
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if attempt == _LOCK_TRIES - 1:
                raise HomeInUse(home, daemon_pid(home) or None) from None
            time.sleep(0.025)


def _hold_folder(home: Path) -> int | None:
    """The home folder, locked; None where its file system cannot lock a folder."""
    fd = os.open(home, _FOLDER)
    try:
        _lock(fd, home)
    except HomeInUse:
        os.close(fd)
        raise
    except OSError as exc:
        os.close(fd)
        log.warning("the file system of %s cannot lock a folder (%s): only %s keeps a second daemon off this home; "
                    "do not delete it while chatgate runs", home, exc.strerror or exc, LOCK_NAME)
        return None
    return fd


def _hold_pid_file(home: Path) -> int:
    """`LOCK_NAME`, locked, with this process's pid written in."""
    # never through a link: the file is truncated and written, so a link (or a hard link) to another
    # file planted in the home would have the daemon — perhaps root — overwrite that file
    fd = os.open(home / LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK, 0o600)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1 or info.st_uid != os.geteuid():
            raise OSError(errno.EPERM, "not a regular file of this user's with no other name", str(home / LOCK_NAME))
        _lock(fd, home)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    except BaseException:
        os.close(fd)
        raise
    return fd


class HomeLock:
    """The daemon's hold on its home, while the process lives (the kernel lets go when it exits, even at
    kill -9; the descriptors are not inherited by the commands it runs): an exclusive `flock` on the home
    folder itself, and one on `LOCK_NAME` in it, with the pid written inside for `chatgate status`.

    The folder is what a second daemon on the same home opens too, and it cannot be deleted while it
    holds the database: deleting `LOCK_NAME` (a pid file, to a tidy-minded person or script) no longer
    lets a second daemon in to answer the first one's turns again. The lock goes with the folder, not
    its name: a home renamed while its daemon runs takes the lock along, and an empty folder made in its
    place is a new home. `LOCK_NAME` stays locked too: it is what a chatgate before this one locks
    (a new one refuses to start beside it), and what keeps a second daemon off where a file system
    cannot lock a folder."""

    def __init__(self, fds: list[int]) -> None:
        self._fds = fds

    @classmethod
    def take(cls, home: Path) -> "HomeLock":
        """Hold `home`, or raise `HomeInUse` naming the daemon that does (OSError: cannot open or lock it,
        its `filename` says what)."""
        home.mkdir(mode=0o700, parents=True, exist_ok=True)
        fds: list[int] = []
        try:
            folder = _hold_folder(home)  # (first: a daemon refused here has not touched the home)
            fds += [folder] if folder is not None else []
            fds.append(_hold_pid_file(home))
        except BaseException:
            for fd in fds:
                os.close(fd)
            raise
        return cls(fds)

    def release(self) -> None:
        """Let go (the pid file stays: removing it would race with the next daemon opening it)."""
        fds, self._fds = self._fds, []
        for fd in fds:
            os.close(fd)


def daemon_pid(home: Path) -> int | None:
    """The pid of the daemon holding `home` (0: one does, its pid not known — `LOCK_NAME` was deleted
    while it ran), None when none does."""
    written = _holder(home / LOCK_NAME, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW, stat.S_ISREG)
    return written if written is not None else _holder(home, _FOLDER, stat.S_ISDIR)


_KINDS = {stat.S_IFIFO: "a FIFO", stat.S_IFSOCK: "a socket", stat.S_IFCHR: "a device", stat.S_IFBLK: "a device",
          stat.S_IFDIR: "a folder", stat.S_IFLNK: "a symbolic link"}


def lock_file_problem(home: Path) -> str | None:
    """Why `LOCK_NAME` in `home` is not read for a pid (one line), if it is there and not a regular file."""
    path = home / LOCK_NAME
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        return None
    if stat.S_ISREG(mode):
        return None
    kind = _KINDS.get(stat.S_IFMT(mode), "not a file")
    return f"{path} is {kind}, not a regular file: its pid is not read (remove it)"


def may_migrate(home: Path, database_url: str | None) -> bool:
    """Whether a command (not the daemon) may create or upgrade the schema: SQLite's, with no daemon on
    the home; PostgreSQL's (`database_url`), never (instances on other machines may be running on it)."""
    return database_url is None and daemon_pid(home) is None
