"""Files opened beneath a folder the way `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)` would.

Each path component is opened relative to the descriptor of the one before, with `O_NOFOLLOW`:
a symbolic link anywhere on the way is refused, so a link planted by a command (`ln -s ~ h`)
cannot carry a write out of the workspace, and there is no gap between checking a path and
using it for a swapped link to slip through. Only regular files are read or replaced: a FIFO
(which would block a read for ever) or a device is refused. `..` is resolved by the caller
before, and links are resolved by the caller too (`realpath`): what is opened here is the real
path, so a link found on the way was put there since — and is refused. A file can also be refused
by identity (device and inode), whatever its name: chatgate's own database, say, through a hard link.
"""

from __future__ import annotations

import errno
import os
import stat
from contextlib import contextmanager
from pathlib import PurePosixPath
from typing import Collection, Iterable, Iterator

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC  # (non-blocking: a FIFO swapped in cannot hang the open)
_O_PATH = getattr(os, "O_PATH", 0)  # Linux: a handle that names a file without opening it
_CHUNK = 1 << 20
Identity = tuple[int, int]  # (st_dev, st_ino)


class Refused(Exception):
    """The path cannot be used safely; the message says why, for the model."""


def parts_of(relative: str) -> tuple[str, ...]:
    """The components of a path relative to the folder (`.` dropped); `..` must be gone already."""
    parts = tuple(p for p in PurePosixPath(relative).parts if p not in ("", "."))
    if any(p == ".." or "/" in p for p in parts):
        raise Refused(f"{relative} leaves the folder")
    return parts


class Beneath:
    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = os.fspath(root)

    @contextmanager
    def _folder(self, parts: tuple[str, ...], create: bool) -> Iterator[int]:
        """A descriptor of the folder `parts` (made when `create`), walked without following links."""
        fd = os.open(self.root, _DIR)
        try:
            for depth, name in enumerate(parts):
                try:
                    child = os.open(name, _DIR, dir_fd=fd)
                except FileNotFoundError:
                    if not create:
                        raise
                    try:
                        os.mkdir(name, 0o755, dir_fd=fd)
                    except FileExistsError:
                        pass
                    child = os.open(name, _DIR, dir_fd=fd)
                except OSError as exc:
                    raise _refusal(exc, "/".join(parts[: depth + 1]), _is_link(name, fd)) from None
                os.close(fd)
                fd = child
            yield fd
        finally:
            os.close(fd)

    def _open_file(self, parts: tuple[str, ...], dir_fd: int) -> int:
        try:
            fd = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
        except OSError as exc:
            raise _refusal(exc, "/".join(parts), _is_link(parts[-1], dir_fd)) from None
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            os.close(fd)
            kind = "a directory" if stat.S_ISDIR(info.st_mode) else "not a regular file (a FIFO, socket or device)"
            raise Refused(f"{'/'.join(parts)} is {kind}")
        return fd

    def read(self, relative: str, limit: int, refuse: Collection[Identity] = (), *, alone: bool = False) -> bytes:
        """The whole file, if it is a regular file of at most `limit` bytes and not in `refuse`."""
        fd = self.open_regular(relative, refuse, alone=alone)
        with os.fdopen(fd, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            if size > limit:
                raise TooLarge(size)
            return fh.read(limit + 1)

    def open_regular(self, relative: str, refuse: Collection[Identity] = (), *, alone: bool = False) -> int:
        """A read-only descriptor of the regular file `relative`, reached with no link on the way.

        A file whose identity is in `refuse` is refused before it is opened for reading: closing any
        descriptor of a file drops every POSIX lock the process holds on it (SQLite's, on its
        database), and a hard link has the same identity under another name. With `alone`, so is a
        file with any other hard link (where what is chatgate's own is not known)."""
        parts = parts_of(relative)
        if not parts:
            raise Refused(f"{relative or '.'} is a directory")
        with self._folder(parts[:-1], create=False) as folder:
            return _open_checked(parts[-1], folder, "/".join(parts), refuse, alone)

    def head(self, relative: str, limit: int) -> tuple[bytes, int]:
        """The first `limit` bytes of a regular file (no link on the way, no other hard link), and its size."""
        fd = self.open_regular(relative, alone=True)
        try:
            return os.pread(fd, limit, 0), os.fstat(fd).st_size
        finally:
            os.close(fd)

    def listing(self, relative: str, limit: int = 200) -> list[str]:
        """The names in the folder `relative` (the first `limit` found, sorted), reached with no
        link on the way."""
        with self._folder(parts_of(relative), create=False) as folder:
            with os.scandir(folder) as entries:
                return sorted(entry.name for _, entry in zip(range(limit), entries))

    def kind(self, relative: str) -> str | None:
        """What is at `relative` without following anything: "file", "dir", "link", "other", or
        None when nothing is; a link on the way reads as "link"."""
        parts = parts_of(relative)
        if not parts:
            return "dir"
        try:
            with self._folder(parts[:-1], create=False) as folder:
                mode = os.stat(parts[-1], dir_fd=folder, follow_symlinks=False).st_mode
        except ThroughLink:
            return "link"
        except (Refused, OSError):
            return None
        return ("link" if stat.S_ISLNK(mode) else "file" if stat.S_ISREG(mode) else "dir" if stat.S_ISDIR(mode)
                else "other")

    def is_file(self, relative: str) -> bool:
        parts = parts_of(relative)
        if not parts:
            return False
        try:
            with self._folder(parts[:-1], create=False) as folder:
                os.close(self._open_file(parts, folder))
            return True
        except (OSError, Refused):
            return False

    def write(self, relative: str, data: bytes) -> None:
        """Replace (or create) the file with `data`, atomically: a new file beside it, then a rename
        within the same folder descriptor. Folders on the way are made; the mode is kept, less setuid
        and setgid (new content under an old owner's rights: the kernel drops them on a write too)."""
        parts = parts_of(relative)
        if not parts:
            raise Refused(". is a directory")
        with self._folder(parts[:-1], create=True) as folder:
            mode = 0o644
            try:
                info = os.stat(parts[-1], dir_fd=folder, follow_symlinks=False)
                if stat.S_ISLNK(info.st_mode):
                    raise Refused(f"{relative} is a symbolic link; file tools do not follow links")
                if not stat.S_ISREG(info.st_mode):
                    raise Refused(f"{relative} is not a regular file")
                mode = stat.S_IMODE(info.st_mode) & ~(stat.S_ISUID | stat.S_ISGID)
            except FileNotFoundError:
                pass
            temp = f".{parts[-1]}.{os.getpid()}.{os.urandom(4).hex()}.tmp"
            fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                         dir_fd=folder)
            try:
                with os.fdopen(fd, "wb") as fh:
                    fh.write(data)
                    fh.flush()
                    os.fchmod(fh.fileno(), mode)
                    os.fsync(fh.fileno())
                os.replace(temp, parts[-1], src_dir_fd=folder, dst_dir_fd=folder)
            except BaseException:
                try:
                    os.unlink(temp, dir_fd=folder)
                except FileNotFoundError:
                    pass
                raise


def identities(paths: Iterable[str | os.PathLike[str]]) -> frozenset[Identity]:
    """(st_dev, st_ino) of each path that is a regular file, and of the regular files at the top of
    each that is a folder (a state folder: its database with -wal and -shm, its config, its tokens)."""
    found: set[Identity] = set()
    for path in paths:
        try:
            info = os.stat(path)
        except OSError:
            continue
        if stat.S_ISREG(info.st_mode):
            found.add((info.st_dev, info.st_ino))
        elif stat.S_ISDIR(info.st_mode):
            try:
                with os.scandir(path) as entries:
                    for entry in entries:
                        try:
                            inner = entry.stat(follow_symlinks=False)
                        except OSError:
                            continue
                        if stat.S_ISREG(inner.st_mode):
                            found.add((inner.st_dev, inner.st_ino))
            except OSError:
                continue
    return frozenset(found)


def copy_bounded(source: int, dest: int, limit: int) -> int:
    """Copy the file open as `source` (from its start) into `dest`, a chunk at a time, and return
    how many bytes; more than `limit` (the file grew meanwhile, too) raises `TooLarge`."""
    size = os.fstat(source).st_size
    if size > limit:
        raise TooLarge(size)
    copied = 0
    while chunk := os.pread(source, min(_CHUNK, limit + 1 - copied), copied):
        copied += len(chunk)
        if copied > limit:
            raise TooLarge(max(copied, os.fstat(source).st_size))
        view = memoryview(chunk)
        while view:
            view = view[os.write(dest, view):]
    return copied


def _open_checked(name: str, dir_fd: int, shown: str, refuse: Collection[Identity], alone: bool = False) -> int:
    """Open `name` in the folder `dir_fd` for reading: a regular file, not a link, not in `refuse`.
    Where the system allows, the file is looked at through an O_PATH handle (which opens nothing)
    and then reopened through that handle, so what is opened is what was checked."""
    if _O_PATH:
        try:
            handle = os.open(name, _O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
        except OSError as exc:
            raise _refusal(exc, shown, False) from None
        try:
            seen = os.fstat(handle)
            _check(seen, shown, refuse, alone)
            try:
                fd = os.open(f"/proc/self/fd/{handle}", _READ)
            except FileNotFoundError:  # no /proc: the check and the open below are two steps
                fd = None
        finally:
            os.close(handle)
    else:
        fd = None
    if fd is None:
        try:
            seen = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except OSError as exc:
            raise _refusal(exc, shown, False) from None
        _check(seen, shown, refuse, alone)
        try:
            fd = os.open(name, _READ | os.O_NOFOLLOW, dir_fd=dir_fd)
        except OSError as exc:
            raise _refusal(exc, shown, _is_link(name, dir_fd)) from None
    opened = os.fstat(fd)
    if (opened.st_dev, opened.st_ino) != (seen.st_dev, seen.st_ino) or not stat.S_ISREG(opened.st_mode):
        os.close(fd)
        raise Refused(f"{shown} was replaced while it was being opened")
    return fd


def _check(info: os.stat_result, shown: str, refuse: Collection[Identity], alone: bool = False) -> None:
    if stat.S_ISLNK(info.st_mode):
        raise ThroughLink(f"{shown} is a symbolic link; file tools do not follow links (use the real path)")
    if not stat.S_ISREG(info.st_mode):
        kind = "a directory" if stat.S_ISDIR(info.st_mode) else "not a regular file (a FIFO, socket or device)"
        raise Refused(f"{shown} is {kind}")
    if (info.st_dev, info.st_ino) in refuse:
        raise Refused(f"{shown} is one of chatgate's own files (its database, configuration or tokens); "
                      "it is never opened by the file tools")
    if alone and info.st_nlink > 1:
        raise Refused(f"{shown} has other hard links (it may be a file from elsewhere, even chatgate's own); "
                      "it is not opened")


class ThroughLink(Refused):
    """A symbolic link is on the way."""


class TooLarge(Refused):
    def __init__(self, size: int) -> None:
        super().__init__(f"{size} bytes")
        self.size = size


def _is_link(name: str, dir_fd: int) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def _refusal(exc: OSError, shown: str, link: bool) -> Exception:
    if link or exc.errno == errno.ELOOP:
        return ThroughLink(f"{shown} goes through a symbolic link; file tools do not follow links "
                           "(use the terminal, or the real path)")
    if exc.errno == errno.ENOTDIR:
        return Refused(f"{shown}: a part of the path is not a folder")
    return exc
