"""Files people sent, kept under `$CHATGATE_HOME/files/<platform>/<chat>/` and pruned with the messages."""

from __future__ import annotations

import logging
import os
from pathlib import Path

log = logging.getLogger(__name__)


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
