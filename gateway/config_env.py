"""The environment the configuration is read from: the process's, over `$CHATGATE_HOME/env` (the
``KEY=value`` file the systemd unit's ``EnvironmentFile=`` reads too, so that `chatgate run` by hand
and every other command see what the service sees), with each secret's ``NAME_FILE`` variable
(Docker and Kubernetes secrets) read into ``NAME``.

Nothing here changes `os.environ`: the values reach the configuration only, never the agent's
commands. Each variable that did not come straight from the process is described for the person
reading an error or `chatgate config show --origin` ("OPENAI_API_KEY in /home/x/.chatgate/env",
"TELEGRAM_BOT_TOKEN_FILE (/run/secrets/tg)").
"""

from __future__ import annotations

import io
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Mapping

from gateway.config_sources import ConfigError

ENV_FILE = "env"
MAX_SECRET_BYTES = 64 * 1024
_OPEN = os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK  # (a FIFO put there does not hang the command)


@dataclass
class ReadEnvironment:
    """The variables, what to call those that came from a file, and the secret files read."""

    variables: dict[str, str]
    described: dict[str, str] = field(default_factory=dict)  # variable -> where it came from
    secret_files: list[Path] = field(default_factory=list)


def read_environment(process: Mapping[str, str], home: Path, secrets: Iterable[str]) -> ReadEnvironment:
    """`process` over `home`/env, then `secrets` (variable names) filled from their ``_FILE`` variables."""
    path = home / ENV_FILE
    from_file = {name: value for name, value in env_file(path).items() if name not in process}
    read = ReadEnvironment({**from_file, **process}, {name: f"{name} in {path}" for name in from_file})
    for name in secrets:
        _secret_from_file(read, name)
    return read


def env_file(path: Path) -> dict[str, str]:
    """The ``KEY=value`` lines of `path` (python-dotenv's reading: comments, blank lines, quotes,
    ``export``; no ``$VAR`` expansion, as systemd does none), or {} when there is none. It holds
    secrets: a file others may write, or that another user owns (root may read the home owner's), is refused. One owned by root and
    closed to this user is skipped: systemd, reading it as root, passed its variables in already."""
    try:
        fd = os.open(path, _OPEN)
    except FileNotFoundError:
        return {}
    except OSError as exc:
        if isinstance(exc, PermissionError) and _owner(path) == 0:
            return {}
        raise ConfigError(f"config error: cannot read {path}: {exc.strerror}") from None
    with os.fdopen(fd, "rb") as file:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ConfigError(f"config error: {path} is not a regular file")
        if info.st_uid not in (os.geteuid(), 0) and not _root_over_the_homes_owner(path, info.st_uid):
            raise ConfigError(f"config error: {path} belongs to another user (uid {info.st_uid}), and it sets "
                              f"chatgate's secrets: chown it to this user, or remove it")
        if info.st_mode & 0o022:
            raise ConfigError(f"config error: {path} may be changed by other users (mode "
                              f"{stat.S_IMODE(info.st_mode):o}): chmod 600 {path}")
        text = _text(file.read(), str(path))
    from dotenv import dotenv_values

    values = dotenv_values(stream=io.StringIO(text), interpolate=False)
    return {name: value for name, value in values.items() if value is not None and name != "CHATGATE_HOME"}


def _root_over_the_homes_owner(path: Path, owner: int) -> bool:
    """Root running a command on a service account's home (`sudo chatgate status` for the
    `chatgate` user's /var/lib/chatgate): the file is that account's, which runs the daemon anyway."""
    return os.geteuid() == 0 and _owner(path.parent) == owner


def _owner(path: Path) -> int | None:
    try:
        return path.stat().st_uid
    except OSError:
        return None


def _text(data: bytes, what: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"config error: {what} is not UTF-8 text") from None


def _secret_from_file(read: ReadEnvironment, name: str) -> None:
    """``NAME_FILE=/run/secrets/x``: NAME is the file's content, its trailing newline left out."""
    variables, file_variable = read.variables, f"{name}_FILE"
    path = variables.pop(file_variable, "").strip()
    if not path:
        return
    where = read.described.pop(file_variable, file_variable)
    if variables.get(name, "").strip():
        raise ConfigError(f"config error: {read.described.get(name, name)} and {where} are both set; keep one")
    what = f"{file_variable}={path}"
    try:
        with open(path, "rb", buffering=0, opener=lambda p, _: os.open(p, _OPEN)) as file:
            if not stat.S_ISREG(os.fstat(file.fileno()).st_mode):
                raise ConfigError(f"config error: {what} is not a regular file")
            data = file.read(MAX_SECRET_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"config error: cannot read {what}: {exc.strerror}") from None
    if len(data) > MAX_SECRET_BYTES:
        raise ConfigError(f"config error: {what} is larger than {MAX_SECRET_BYTES // 1024} KiB: not a secret")
    variables[name] = _text(data, what).rstrip("\r\n")
    read.described[name] = f"{file_variable} ({path}){where[len(file_variable):]}"  # (+ " in …/env")
    read.secret_files.append(Path(os.path.realpath(path)))
