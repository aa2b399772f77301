"""Files on their way in and out, pruned with the messages.

Files people sent are kept under `$CHATGATE_HOME/files/<platform>/<chat>/`. Files the agent sends
are copied, when its `send_file` runs, into a folder of the turn under `$CHATGATE_HOME/outgoing/`
(0700, hidden from the tools' sandbox and protected without it); only that copy is sent, and it is
removed once the reply has gone out (or was given up).
"""

from __future__ import annotations

import asyncio
import logging
import os
import stat
import tempfile
import threading
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from agent.safety.beneath import Refused, TooLarge, copy_bounded

log = logging.getLogger(__name__)

OUTGOING = "outgoing"
MAX_FILES_PER_REPLY = 10


@dataclass(frozen=True, slots=True)
class OutgoingFile:
    """One file of a reply, as the outbox keeps it: the private copy, the name it goes out as, and
    where the agent took it from (what a platform that cannot receive files is told)."""

    copy: str
    name: str
    where: str

    def entry(self) -> dict[str, str]:
        return {"copy": self.copy, "name": self.name, "where": self.where}

    @classmethod
    def of(cls, entry: Any) -> "OutgoingFile | None":
        """The file an outbox entry names; None for one that is not a captured copy (an older
        version's bare path, which is never opened)."""
        if isinstance(entry, dict) and all(isinstance(entry.get(k), str) for k in ("copy", "name", "where")):
            return cls(entry["copy"], entry["name"], entry["where"])
        return None

    def ready(self) -> bool:
        """The copy is still there, as a regular file (not a link)."""
        try:
            return stat.S_ISREG(os.lstat(self.copy).st_mode)
        except OSError:
            return False


class Outgoing:
    """The files the agent hands over during one turn (its `FileSink`), each copied into the turn's
    own folder as it is handed over."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.files: list[OutgoingFile] = []
        self._folder: Path | None = None
        self._made = threading.Lock()
        self._count = 0
        self._one_at_a_time = asyncio.Lock()  # tool calls of a step run together: each checks, then copies

    @property
    def entries(self) -> list[dict[str, str]]:
        """What the outbox keeps of them."""
        return [f.entry() for f in self.files]

    async def keep(self, source: int, name: str, where: str, limit: int) -> None:
        async with self._one_at_a_time:  # (else forty calls at once all pass the count, and all copy)
            await self._keep(source, name, where, limit)

    async def _keep(self, source: int, name: str, where: str, limit: int) -> None:
        earlier = [f for f in self.files if f.where == where]  # sent again: the newer copy replaces it
        if not earlier and len(self.files) >= MAX_FILES_PER_REPLY:
            raise Refused(f"a reply carries at most {MAX_FILES_PER_REPLY} files; put the rest in an archive")
        size = os.fstat(source).st_size
        if size > limit:
            raise TooLarge(size)
        self._count += 1
        copy = await asyncio.to_thread(self._copy, source, name, self._count, limit)
        self.files = [f for f in self.files if f.where != where]
        self.files.append(OutgoingFile(str(copy), name, where))
        if earlier:
            await asyncio.to_thread(discard, [f.entry() for f in earlier])

    def _copy(self, source: int, name: str, number: int, limit: int) -> Path:
        for attempt in range(3):  # (the retention may take an empty turn folder away just as it is used)
            folder = self._turn_folder() / str(number)
            copy = folder / name
            try:
                os.mkdir(folder, 0o700)
                fd = os.open(copy, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
                break
            except FileNotFoundError:
                if attempt == 2:
                    raise
                with self._made:
                    self._folder = None
            except OSError:
                with suppress(OSError):
                    folder.rmdir()
                raise
        try:
            copy_bounded(source, fd, limit)
        except BaseException:
            copy.unlink(missing_ok=True)
            folder.rmdir()
            raise
        finally:
            os.close(fd)
        return copy

    def _turn_folder(self) -> Path:
        with self._made:
            if self._folder is None:
                root = self.home / OUTGOING
                root.mkdir(mode=0o700, parents=True, exist_ok=True)
                info = os.lstat(root)
                if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
                    raise Refused(f"{root} is not a folder of chatgate's own; nothing can be sent until it is")
                if stat.S_IMODE(info.st_mode) != 0o700:
                    os.chmod(root, 0o700)
                self._folder = Path(tempfile.mkdtemp(dir=root))  # (0700 too)
            return self._folder


def discard(entries: Iterable[Any]) -> None:
    """Remove the copies these outbox entries name, and their folders once empty."""
    for entry in entries:
        sent = OutgoingFile.of(entry)
        if sent is None:
            continue
        copy = Path(sent.copy)
        if copy.parent.parent.parent.name != OUTGOING:  # (only ever a copy of ours)
            continue
        try:
            copy.unlink(missing_ok=True)
            copy.parent.rmdir()
            copy.parent.parent.rmdir()  # the turn's folder, after its last file
        except OSError:
            pass  # not empty yet, or gone already; the rest goes with the retention


def prune_files(root: Path, before: float) -> int:
    """Delete files last changed before `before` (and folders left empty); return how many went."""
    removed = 0
    if not root.is_dir():
        return 0
    for folder, dirs, files in os.walk(root, topdown=False):
        for name in files:
            path = Path(folder, name)
            try:
                if path.lstat().st_mtime < before:
                    path.unlink()
                    removed += 1
            except OSError as exc:
                log.warning("could not prune %s: %s", path, exc)
        if Path(folder) != root:
            try:
                os.rmdir(folder)  # only succeeds when it is empty
            except OSError:
                pass
    if removed:
        log.info("pruned %d old file(s) under %s", removed, root)
    return removed
