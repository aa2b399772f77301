"""What a `chatgate backup` archive holds, and unpacking one without trusting it.

An archive given to `chatgate restore` may come from anywhere (a copy on another machine, a file
someone handed over): it is read as a stream, member by member, and each member is checked before a
byte of it is written — a name under the names a backup uses, no absolute path, no `..`, only regular
files and folders (no links, devices or pipes), sizes a backup can have and the disk can hold. What
it writes is made by this code (exclusive creation, no link followed), files 0600 and folders 0700.
The database must then pass SQLite's `PRAGMA integrity_check` and be one chatgate can open.
"""

from __future__ import annotations

import importlib.util
import os
import sqlite3
import tarfile
import zlib
from pathlib import Path
from typing import IO

DATABASE = "state.db"
FILES = (DATABASE, "config.yaml", "webchat-token", "env")  # a backup's files, at its top
FOLDERS = ("memory", "skills")  # its folders, with files and folders in them
# beside the database while it is open: never left beside another database
DATABASE_COMPANIONS = ("state.db-wal", "state.db-shm", "state.db-journal")
SMALL_FILE_LIMIT = 1 << 20  # config.yaml, webchat-token, env: a megabyte is far more than any has
MEMBER_LIMIT = 100_000
DEPTH_LIMIT = 32
DISK_RESERVE = 64 << 20  # left free on the disk after unpacking


class BadArchive(ValueError):
    """The archive is not a sound chatgate backup; the message says why, in one line."""


class Unwritable(Exception):
    """Unpacking failed on this side (a full disk, a folder that cannot be written): the OSError is its
    `reason`."""

    def __init__(self, reason: OSError) -> None:
        super().__init__(reason.strerror or str(reason))
        self.reason = reason


def files_and_folders(member: tarfile.TarInfo) -> tarfile.TarInfo | None:
    """`chatgate backup`'s filter: a link or a device inside memory/ or skills/ is left out (restore
    refuses an archive with one)."""
    return member if member.type in (tarfile.REGTYPE, tarfile.AREGTYPE) or member.isdir() else None


def unpack(archive: IO[bytes], into: Path, budget: int) -> list[str]:
    """Check and write `archive`'s members under the empty folder `into`, at most `budget` bytes in
    all; the names found at its top. BadArchive at the first member that is not right (what was written
    under `into` stays for the caller to remove)."""
    top: set[str] = set()
    total = 0
    try:
        with tarfile.open(fileobj=archive, mode="r|gz") as tar:
            for count, member in enumerate(tar, start=1):
                if count > MEMBER_LIMIT:
                    raise BadArchive(f"it has more than {MEMBER_LIMIT:,} members: no backup has")
                parts = _checked(member)
                total += member.size
                if total > budget:
                    raise BadArchive(f"it would take more than {budget / 1e6:,.0f} MB unpacked, more than the disk "
                                     f"has free (member {_shown(member.name)} says {member.size / 1e6:,.0f} MB)")
                _write(tar, member, into.joinpath(*parts))
                top.add(parts[0])
    except (tarfile.TarError, EOFError, zlib.error, OSError) as exc:  # (reading it: gzip's errors are OSErrors)
        raise BadArchive(f"it is not a complete .tar.gz ({exc or type(exc).__name__})") from None
    if DATABASE not in top:
        raise BadArchive(f"it holds no {DATABASE}: not a chatgate backup")
    return sorted(top)


def _shown(name: str) -> str:
    return repr(name if len(name) <= 80 else name[:79] + "…")


def _checked(member: tarfile.TarInfo) -> list[str]:
    """The member's path, as parts, when it is one a backup can have; BadArchive otherwise."""
    name = member.name
    parts = name.split("/")
    if name.startswith("/") or any(part in ("", ".", "..") for part in parts) or len(parts) > DEPTH_LIMIT \
            or not name.isprintable() or "\\" in name:
        raise BadArchive(f"member {_shown(name)} has a path that would not stay in the home")
    regular = member.type in (tarfile.REGTYPE, tarfile.AREGTYPE)
    if not regular and not member.isdir():
        kind = "a link" if member.issym() or member.islnk() else "not a regular file or folder"
        raise BadArchive(f"member {_shown(name)} is {kind}: a backup holds only files and folders")
    if parts[0] in FILES and (len(parts) > 1 or not regular) or parts[0] in FOLDERS and len(parts) == 1 and regular:
        raise BadArchive(f"member {_shown(name)} is not what a backup holds under that name")
    if parts[0] not in FILES and parts[0] not in FOLDERS:
        raise BadArchive(f"member {_shown(name)} is not part of a chatgate backup "
                         f"({', '.join(FILES + FOLDERS)})")
    if parts[0] in FILES[1:] and member.size > SMALL_FILE_LIMIT:
        raise BadArchive(f"member {_shown(name)} is {member.size / 1e6:,.1f} MB: far more than such a file holds")
    return parts


def _write(tar: tarfile.TarFile, member: tarfile.TarInfo, path: Path) -> None:
    """The member at `path`: a folder 0700, or a new file 0600 with its bytes (never through a link:
    nothing under the folder was made by anyone but this)."""
    try:
        if member.isdir():
            path.mkdir(mode=0o700, parents=True, exist_ok=True)
            return
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except FileExistsError:
        raise BadArchive(f"member {_shown(member.name)} is in it twice (or inside a file)") from None
    except OSError as exc:
        raise Unwritable(exc) from None
    source = tar.extractfile(member)
    assert source is not None  # (a regular file's)
    try:
        while chunk := source.read(1 << 20):
            _write_all(fd, memoryview(chunk))
    finally:
        os.close(fd)


def _write_all(fd: int, data: memoryview) -> None:
    while data:
        try:
            data = data[os.write(fd, data):]
        except OSError as exc:
            raise Unwritable(exc) from None


def check_database(path: Path) -> None:
    """BadArchive unless `path` passes SQLite's integrity check and this chatgate can open it."""
    try:
        db = sqlite3.connect(path, isolation_level=None)
        try:
            found = [row[0] for row in db.execute("PRAGMA integrity_check(20)")]
            version = int(db.execute("PRAGMA user_version").fetchone()[0])
        finally:
            db.close()
    except sqlite3.Error as exc:
        raise BadArchive(f"its {DATABASE} cannot be read: {exc}") from None
    if found != ["ok"]:
        raise BadArchive(f"its {DATABASE} is damaged: {'; '.join(found)[:300]}")
    latest = _latest_schema()
    if version < 1:
        raise BadArchive(f"its {DATABASE} is not chatgate's (no schema version)")
    if version > latest:
        raise BadArchive(f"its {DATABASE} was made by a newer chatgate (schema version {version}; this one knows up "
                         f"to {latest}): restore it with that version")


def _latest_schema() -> int:
    """The number of the last migration this chatgate has (gateway.storage.schema applies them), read
    from their file names without loading the storage and its event loop."""
    spec = importlib.util.find_spec("gateway.storage")
    assert spec is not None and spec.submodule_search_locations
    folder = Path(next(iter(spec.submodule_search_locations))) / "migrations"
    return max(int(file.name.split("_", 1)[0]) for file in folder.glob("*.sql"))
