"""Files opened beneath a folder the way `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)` would.

Each path component is opened relative to the descriptor of the one before, with `O_NOFOLLOW`:
a symbolic link anywhere on the way is refused, so a link planted by a command (`ln -s ~ h`)
cannot carry a write out of the workspace, and there is no gap between checking a path and
using it for a swapped link to slip through. Only regular files are read or replaced: a FIFO
(which would block a read for ever) or a device is refused. `..` is resolved by the caller
before, and links are resolved by the caller too (`realpath`): what is opened here is the real
path, so a link found on the way was put there since — and is refused.
"""

from __future__ import annotations

import errno
import os
import stat
from contextlib import contextmanager
from pathlib import PurePosixPath
from typing import Iterator

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


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

    def read(self, relative: str, limit: int) -> bytes:
        """The whole file, if it is a regular file of at most `limit` bytes."""
        parts = parts_of(relative)
        if not parts:
            raise Refused(f"{relative or '.'} is a directory")
        with self._folder(parts[:-1], create=False) as folder:
            fd = self._open_file(parts, folder)
            with os.fdopen(fd, "rb") as fh:
                size = os.fstat(fh.fileno()).st_size
                if size > limit:
                    raise TooLarge(size)
                return fh.read(limit + 1)

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
        within the same folder descriptor. Folders on the way are made; the mode is kept."""
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
                mode = stat.S_IMODE(info.st_mode)
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
        return Refused(f"{shown} goes through a symbolic link; file tools do not follow links "
                       "(use the terminal, or the real path)")
    if exc.errno == errno.ENOTDIR:
        return Refused(f"{shown}: a part of the path is not a folder")
    return exc
