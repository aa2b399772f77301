"""What `chatgate setup` writes: the config file (checked as `chatgate run` will read it, then put in
place at once, mode 0600, a copy of the one it replaces kept beside it), and the service it installs
when the person agrees (`chatgate service install`, run as its own command)."""

from __future__ import annotations

import copy
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml


class Stop(Exception):
    """Setup ends here with this one line (nothing more is written) and exit status."""

    def __init__(self, message: str, status: int = 1) -> None:
        super().__init__(message)
        self.status = status


def read_config(path: Path) -> dict[str, Any]:
    """The config file's data as `chatgate run` reads it (empty when there is none)."""
    from gateway.config import Config
    from gateway.config_sources import ConfigError, YamlFile

    try:
        return YamlFile(Config, path, required=False).data
    except ConfigError as exc:
        raise Stop(f"chatgate setup: {exc}; fix it or move it away first", 2) from None

def merged(data: dict[str, Any], llm: dict[str, Any], platform: dict[str, Any], admin: str | None) -> dict[str, Any]:
    """The config file's data with the answers in it (every other key kept as it was)."""
    new = copy.deepcopy(data)

    def section(parent: dict[str, Any], key: str) -> dict[str, Any]:
        if not isinstance(parent.get(key), dict):
            parent[key] = {}
        return parent[key]  # type: ignore[no-any-return]

    for key, value in llm.items():
        if value is None:
            section(new, "llm").pop(key, None)
        else:
            section(new, "llm")[key] = value
    name = platform["platform"]
    section(section(new, "platforms"), name).update(
        {k: v for k, v in platform.items() if k not in ("platform", "username")})
    if admin is not None:
        admins = section(section(new, "access"), "admins")
        known = [str(x) for x in admins.get(name) or []] if isinstance(admins.get(name), list) else []
        admins[name] = known if admin in known else [*known, admin]
    return new


def _private(path: Path, text: str) -> None:
    """`text` in a new file only its owner can read (an old one there is replaced)."""
    path.unlink(missing_ok=True)
    with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w", encoding="utf-8") as out:
        out.write(text)


def write_config(path: Path, home: Path, data: dict[str, Any], owner: str | None = None) -> None:
    """Write `data` to `path` once it reads as a valid configuration; the file it replaces is kept as
    `<name>.bak` (0600). `owner`: the account the service will run as, when root writes for the person
    behind sudo (the files, and the folder when made here, become theirs)."""
    from gateway.config import ConfigError, load_config

    made = not path.parent.exists()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    new = path.with_name(f"{path.name}.new")
    _private(new, "# written by `chatgate setup`; every key is described in the README\n"
                  + yaml.safe_dump(data, sort_keys=False, allow_unicode=True))
    try:
        load_config(new, env={"CHATGATE_HOME": str(home)})
    except ConfigError as exc:
        new.unlink()
        raise Stop(f"chatgate setup: nothing written: {str(exc).replace(str(new), str(path))}") from None
    backup = path.with_name(f"{path.name}.bak")
    if path.exists():
        _private(backup, path.read_text(encoding="utf-8"))
    os.replace(new, path)
    if owner is not None:
        for written in [path, *([backup] if backup.exists() else []), *([path.parent] if made else [])]:
            shutil.chown(written, owner)


def install_service(config: Path | None, unit_dir: str | None) -> int:
    """`chatgate service install` (a user service unless run as root), its output shown; its exit status."""
    command = [sys.executable, "-m", "gateway", *(["--config", str(config)] if config else []), "service", "install",
               *(["--user"] if os.geteuid() != 0 else []), *(["--unit-dir", unit_dir] if unit_dir else [])]
    try:
        return subprocess.run(command, check=False).returncode
    except KeyboardInterrupt:  # (it stopped too)
        return 130
