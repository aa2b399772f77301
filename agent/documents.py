"""Named text documents: where the agent's memory and skills are kept.

A document's name is a relative POSIX path (`memory/MEMORY.md`, `skills/<name>/SKILL.md`,
`skills/.archive/<name>/SKILL.md`). The agent states what it needs as the `Documents` port; two kinds
serve it: `FolderDocuments`, files under a folder (the home of a daemon that runs alone: what a person
reads and edits with an editor), and the gateway's table of documents in a database several instances
share (gateway.storage.documents), where what one instance committed is what another reads next.

`move`, `copy` and `delete_all` take a *path*: the document of that name and every document under it
(`skills/notes` is `skills/notes/SKILL.md`, `skills/notes/scripts/run.sh`, ... and never `skills/notes2/...`).
`names` takes a plain prefix of the name.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import shutil
import stat
from pathlib import Path, PurePosixPath
from typing import Callable, Hashable, Protocol

Edit = Callable[[str | None], str | None]  # the old text (None: no such document) → the new (None: delete it)


class BadName(ValueError):
    """A name that is not a relative path inside the documents (absolute, `..`, empty parts)."""


def checked(name: str) -> str:
    """`name` when it is a document's name (a relative POSIX path, no `.`/`..`/empty part, no NUL or
    backslash); BadName otherwise."""
    parts = name.split("/")
    if not name or name.startswith("/") or any(p in ("", ".", "..") for p in parts) or "\0" in name \
            or "\\" in name or PurePosixPath(name).is_absolute():
        raise BadName(f"{name!r} is not a document's name (a relative path without '..')")
    return name


def checked_path(path: str) -> str:
    """A path argument of `move`, `copy`, `delete_all` (a trailing '/' is allowed, and dropped)."""
    return checked(path[:-1] if path.endswith("/") else path)


def under(name: str, path: str) -> bool:
    """Whether document `name` is the document `path` or under it."""
    return name == path or name.startswith(path + "/")


class Documents(Protocol):
    """Named text documents (see the module doc). Every name is checked (`BadName`)."""

    async def read(self, name: str) -> str | None:
        """The document's text; None when there is none."""

    async def write(self, name: str, text: str) -> None:
        """Create or replace the document, at once: a reader sees the old text or the new, never part."""

    async def delete(self, name: str) -> bool:
        """Remove the document; whether there was one."""

    async def names(self, prefix: str) -> list[str]:
        """Every document whose name starts with `prefix`, sorted."""

    async def move(self, src: str, dst: str) -> int:
        """Rename the document `src` and those under it to `dst` (a document already at a new name is
        replaced); how many moved."""

    async def copy(self, src: str, dst: str) -> int:
        """Copy the document `src` and those under it to `dst` (replacing any at the new names); how many."""

    async def delete_all(self, path: str) -> int:
        """Remove the document `path` and those under it; how many."""

    async def update(self, name: str, edit: Edit) -> str | None:
        """Read-modify-write as one: `edit(old)` gives the new text (None: delete the document); what it
        raises aborts the update and nothing is written. No other update of the document (by any process
        that shares these documents) comes between the read and the write. Returns the new text."""

    async def stamp(self) -> Hashable:
        """A value that changes when a document changes (a cache of what they hold is fresh while it is
        the same)."""


def _inside(path: str, folder: str) -> bool:
    """`path` is `folder` or under it (both absolute, with no links and no `..`: as realpath and the kernel give them)."""
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


class FolderDocuments:
    """Documents as files under `root`: `memory/MEMORY.md` is `root/memory/MEMORY.md`. A name's file must
    stay, with links resolved, inside the top folder the name starts with (`root/memory` for
    `memory/...`), so a link cannot lead a read or a write elsewhere (into the home's config, say).

    `stamp` changes with every change made through this object, and with any change to a file a skill's
    index is read from (`skills/*/SKILL.md`, and the `skills` folder itself) made by another process or by
    hand: what a cache of the skill index depends on."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._real_root = os.path.realpath(root)  # (where the checks hold documents to be: a root moved later
        # holds none)
        self._locks: dict[str, asyncio.Lock] = {}
        self._changes = 0

    # -- names to paths ----------------------------------------------------------------------------

    def path(self, name: str) -> Path:
        """The file of document `name` (BadName when it would be outside its top folder). (The checks compare
        strings: pathlib's objects made most of a read's cost.)"""
        parts = checked(name).split("/")
        path = self.root.joinpath(*parts)
        resolved = os.path.realpath(path)
        if len(parts) > 1 and not _inside(resolved, self._top(name)) or not _inside(resolved, self._real_root):
            raise BadName(f"{name!r} leads outside its folder")
        return path

    def _top(self, name: str) -> str:
        """The name's top folder, where the root was resolved, never where a link now in its place leads: a top
        folder read again at each check let a program swap `skills` for a link to the home between the check
        and the use, and `skills/config.yaml` was then the home's config (a top folder that is a link holds none)."""
        parts = checked(name).split("/")
        return os.path.join(self._real_root, parts[0]) if len(parts) > 1 else self._real_root

    def _folder(self, name: str, *, create: bool = False) -> tuple[int, str]:
        """The folder document `name`'s file is in, opened (an fd), and the file's name in it. Where the opened
        folder is, as the kernel has it, is checked to be inside the name's top folder: what was checked is
        what is used, even when another program swaps a folder for a link after `path` looked."""
        path = self.path(name)
        if create:
            path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
        try:
            self._held(fd, name)
        except BaseException:
            os.close(fd)
            raise
        return fd, path.name

    def _held(self, fd: int, name: str) -> None:
        """BadName unless the open `fd` is inside document `name`'s top folder."""
        where = os.readlink(f"/proc/self/fd/{fd}")
        if not _inside(where, self._top(name)) or not _inside(where, self._real_root):
            raise BadName(f"{name!r} leads outside its folder")

    def _name(self, path: Path) -> str:
        return path.relative_to(self.root).as_posix()

    # -- the port, each on a thread -------------------------------------------------------------------

    async def read(self, name: str) -> str | None:
        return await asyncio.to_thread(self._read, name)

    async def write(self, name: str, text: str) -> None:
        await asyncio.to_thread(self._write, name, text)

    async def delete(self, name: str) -> bool:
        return await asyncio.to_thread(self._delete, name)

    async def names(self, prefix: str) -> list[str]:
        return await asyncio.to_thread(self._names, prefix)

    async def move(self, src: str, dst: str) -> int:
        return await asyncio.to_thread(self._transfer, src, dst, True)

    async def copy(self, src: str, dst: str) -> int:
        return await asyncio.to_thread(self._transfer, src, dst, False)

    async def delete_all(self, path: str) -> int:
        return await asyncio.to_thread(self._delete_all, path)

    async def update(self, name: str, edit: Edit) -> str | None:
        async with self._locks.setdefault(checked(name), asyncio.Lock()):
            new = edit(await self.read(name))
            if new is None:
                await self.delete(name)
            else:
                await self.write(name, new)
            return new

    async def stamp(self) -> Hashable:
        return self._changes, await asyncio.to_thread(self._skill_files)

    # -- on the thread -------------------------------------------------------------------------------

    def _read(self, name: str) -> str | None:
        data = self._read_bytes(name)
        return None if data is None else data.decode("utf-8")

    def _read_bytes(self, name: str) -> bytes | None:
        try:
            folder, file = self._folder(name)
            try:
                found = os.open(file, os.O_PATH, dir_fd=folder)  # (a link is followed, but nothing is opened yet:
            finally:  # where it led is checked first, and a FIFO or a device, here or out of the home, is not read)
                os.close(folder)
            try:
                self._held(found, name)
                mode = os.fstat(found).st_mode
                if stat.S_ISDIR(mode):
                    raise IsADirectoryError(name)
                if not stat.S_ISREG(mode):
                    raise BadName(f"{name!r} is not a regular file")
                fd = os.open(f"/proc/self/fd/{found}", os.O_RDONLY)  # (the very file checked)
            finally:
                os.close(found)
            with os.fdopen(fd, "rb") as f:
                return f.read()
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            return None

    def _write(self, name: str, data: str | bytes) -> None:
        folder, file = self._folder(name, create=True)
        try:
            _write_at(folder, file, data.encode("utf-8") if isinstance(data, str) else data)
        finally:
            os.close(folder)
        self._changes += 1

    def _delete(self, name: str) -> bool:
        try:
            folder, file = self._folder(name)
        except (FileNotFoundError, NotADirectoryError):
            return False
        try:
            os.unlink(file, dir_fd=folder)
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError, PermissionError):
            return False
        finally:
            os.close(folder)
        self._changes += 1
        return True

    def _rename(self, src: str, dst: str) -> None:
        """Rename `src` (a file or a folder) to `dst`, both opened and checked where they are (see `_folder`)."""
        source, source_file = self._folder(src)
        try:
            target, target_file = self._folder(dst, create=True)
            try:
                os.replace(source_file, target_file, src_dir_fd=source, dst_dir_fd=target)
            finally:
                os.close(target)
        finally:
            os.close(source)

    def _names(self, prefix: str) -> list[str]:
        start = prefix.rsplit("/", 1)[0] if "/" in prefix else ""
        try:
            folder = self.path(start) if start else self.root  # (a folder linked out of the home is not walked)
        except BadName:
            return []
        if not folder.is_dir():
            return []
        found = []
        for dirpath, _dirs, files in os.walk(folder):
            for file in files:
                name = self._name(Path(dirpath) / file)
                if name.startswith(prefix) and self._inside(name):
                    found.append(name)
        return sorted(found)

    def _inside(self, name: str) -> bool:
        try:
            return self.path(name).is_file()
        except BadName:
            return False

    def _files(self, path: str) -> list[str]:
        """The documents at `path` and under it."""
        path = checked_path(path)
        single = [path] if self._inside(path) else []
        return single + self._names(path + "/")

    def _transfer(self, src: str, dst: str, moving: bool) -> int:
        src, dst = checked_path(src), checked_path(dst)
        if under(dst, src) or under(src, dst):
            raise BadName(f"cannot {'move' if moving else 'copy'} {src!r} to {dst!r}: one is inside the other")
        found = self._files(src)
        if not found:
            return 0
        source, target = self.path(src), self.path(dst)
        if moving and not target.exists() and not target.is_symlink():  # (a folder in one rename: as it was)
            self._rename(src, dst)
        else:
            for name in found:
                to = dst + name[len(src):]
                if moving:
                    self._rename(name, to)
                else:
                    data = self._read_bytes(name)
                    if data is not None:
                        self._write(to, data)
            if moving and source.is_dir():
                _remove_empty(source)
        self._changes += 1
        return len(found)

    def _delete_all(self, path: str) -> int:
        found = self._files(path)
        path = checked_path(path)
        target = self.path(path)
        if target.is_dir() and not target.is_symlink():
            folder, file = self._folder(path)
            try:
                shutil.rmtree(file, dir_fd=folder)  # (by fds: it refuses a link put in the folder's place)
            finally:
                os.close(folder)
        else:
            for name in found:
                self._delete(name)
        self._changes += bool(found)
        return len(found)

    def _skill_files(self) -> tuple[tuple[str, int], ...]:
        skills = self.root / "skills"
        found = []
        for path in [skills, *skills.glob("*/SKILL.md")] if skills.is_dir() else ():
            try:
                found.append((str(path), path.stat().st_mtime_ns))
            except OSError:
                continue
        return tuple(sorted(found))


def _write_at(folder: int, file: str, data: bytes) -> None:
    """Replace `file` in the open `folder` with `data`, at once (a temporary file renamed over it)."""
    tmp = f".{file}.{secrets.token_hex(6)}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, file, src_dir_fd=folder, dst_dir_fd=folder)
    except BaseException:
        try:
            os.unlink(tmp, dir_fd=folder)
        except FileNotFoundError:
            pass
        raise


def _remove_empty(folder: Path) -> None:
    """Remove `folder` and the folders under it that hold nothing (after its files were moved out)."""
    for dirpath, _dirs, _files in sorted(os.walk(folder), key=lambda entry: -len(entry[0])):
        try:
            os.rmdir(dirpath)
        except OSError:
            pass
