"""`chatgate restore ARCHIVE [--force]`: the state a `chatgate backup` archive holds, put back.

It holds the home's lock from start to end (`HomeLock`, what `chatgate run` takes): it refuses while
a daemon runs on the home, and no daemon can start on it while it works. The archive is checked and
unpacked into a folder of its own inside the home (gateway.ops.archive), the database checked there;
only then is anything in the home moved, by renames. What the archive replaces (the database, the
config, memory, skills, the web chat's token, `env`) is moved aside first — into
`<home>.before-restore-<time>` beside the home — and only when asked to (`--force`); the rest of the
home (the agent's workspace, files people sent, logs) stays where it is. Any refusal or failure
leaves the home as it was.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from gateway.ops.archive import DATABASE, DATABASE_COMPANIONS, DISK_RESERVE, FILES, FOLDERS, BadArchive, \
    Unwritable, check_database, unpack
from gateway.ops.process import LOCK_NAME, HomeInUse, HomeLock, home_from_env

REPLACED = FILES + FOLDERS + DATABASE_COMPANIONS  # what a restore puts aside (the rest of the home stays)


class Refused(Exception):
    """The restore did not happen, and the home is as it was; the message says why."""


def restore(args: argparse.Namespace) -> int:
    archive = Path(args.archive).expanduser()
    home = home_from_env()
    try:
        restored, aside = _restore(archive, home, force=args.force)
    except Refused as exc:
        print(f"chatgate restore: {exc}; nothing was changed", file=sys.stderr)
        return 1
    print(f"restored {', '.join(restored)} from {archive} into {home}")
    if aside is not None:
        print(f"the state it replaced is in {aside}")
    print("start chatgate again (`chatgate service start`, or `chatgate run`); a database from an older chatgate "
          "is upgraded at start")
    return 0


def _restore(archive: Path, home: Path, *, force: bool) -> tuple[list[str], Path | None]:
    """Hold the home, check and unpack the archive, swap it in; (what was restored, where the replaced
    state went)."""
    if archive.is_dir() or not os.access(archive, os.R_OK):
        raise Refused(f"{archive} is not a file this user can read")
    made = not home.exists()
    lock = _hold(home)
    done = False
    try:
        present = [name for name in REPLACED if os.path.lexists(home / name)]
        if present and not force:  # (before the archive is read: it may be large)
            raise Refused(f"{home} already holds chatgate's state ({', '.join(present)}): add --force to restore "
                          "over it (what it replaces is moved aside, not deleted)")
        staging = _unpacked(archive, home)
        try:
            aside = _move_in(staging, home, [name for name in REPLACED if os.path.lexists(home / name)])
            done = True
            return sorted(entry.name for entry in home.iterdir() if entry.name in REPLACED), aside
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    finally:
        lock.release()
        if made and not done:  # (the lock made it: take back the empty home)
            _remove_made_home(home)


def _hold(home: Path) -> HomeLock:
    try:
        return HomeLock.take(home)
    except HomeInUse as exc:
        raise Refused(f"chatgate is running on {home} (pid {exc.pid or 'unknown'}): stop it first "
                      "(`chatgate service stop`, or Ctrl-C where it runs)") from None
    except OSError as exc:
        raise Refused(f"cannot lock {exc.filename or home}: {exc.strerror or exc}") from None


def _unpacked(archive: Path, home: Path) -> Path:
    """The archive, checked and unpacked into a new folder in the home, its database checked."""
    staging = Path(tempfile.mkdtemp(prefix=".restore-", dir=home))
    try:
        with archive.open("rb") as raw:
            unpack(raw, staging, shutil.disk_usage(home).free - DISK_RESERVE)
        check_database(staging / DATABASE)
    except BadArchive as exc:
        shutil.rmtree(staging, ignore_errors=True)
        raise Refused(f"{archive} is not a sound chatgate backup: {exc}") from None
    except (Unwritable, OSError) as exc:
        shutil.rmtree(staging, ignore_errors=True)
        raise Refused(f"cannot unpack {archive} into {home}: {exc}") from None
    return staging


def _move_in(staging: Path, home: Path, present: list[str]) -> Path | None:
    """Move `present` out of the home (into a new folder beside it, named in the return), then the
    unpacked state in; every move undone when one fails."""
    aside = _aside_folder(home) if present else None
    moves = [(home / name, aside / name) for name in present] if aside else []
    moves += [(entry, home / entry.name) for entry in sorted(staging.iterdir())]
    done: list[tuple[Path, Path]] = []
    try:
        for source, target in moves:
            os.rename(source, target)
            done.append((source, target))
    except OSError as exc:
        for source, target in reversed(done):
            os.rename(target, source)
        if aside is not None:
            aside.rmdir()
        raise Refused(f"cannot move {exc.filename}: {exc.strerror or exc}") from None
    return aside


def _aside_folder(home: Path) -> Path:
    """A new folder for the state a restore replaces: `<home>.before-restore-<time>` beside the home
    when renames can reach it (the same file system), else `.before-restore-<time>` inside it (a home
    that is a mount point: a container's volume)."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    beside = home.parent / f"{home.name}.before-restore-{stamp}"
    for folder in (beside, home / f".before-restore-{stamp}"):
        for attempt in range(100):
            candidate = folder.with_name(f"{folder.name}-{attempt}") if attempt else folder
            try:
                candidate.mkdir(mode=0o700)
            except FileExistsError:
                continue
            except OSError:
                break
            if candidate.stat().st_dev == home.stat().st_dev:
                return candidate
            candidate.rmdir()
            break
    raise Refused(f"cannot make a folder for the state it replaces beside {home} or in it")


def _remove_made_home(home: Path) -> None:
    """The home this restore made (empty but for the lock's pid file), removed again."""
    try:
        (home / LOCK_NAME).unlink(missing_ok=True)
        home.rmdir()
    except OSError:
        pass
