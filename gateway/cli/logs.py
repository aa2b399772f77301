"""`chatgate logs [-f] [-n N] [-p PRIORITY] [--user]`: the daemon's log, from wherever it runs.

Where the log is, in this order: the journal when a chatgate unit is installed (`chatgate service
install`: the system's, else the user's — `--user` picks the user's); else `$CHATGATE_HOME/logs/
chatgate.log` when there is one (the daemon writes to its stderr only: that file is where an operator
who runs it by hand sends it, `chatgate run 2>>…`); else, inside a container, the container's output,
which only the host can read (this says so). `journalctl` and `tail` replace this process (exec), so
`-f` follows and Ctrl-C stops them as if they had been run by hand.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import shutil
import subprocess
import sys
from collections import deque
from pathlib import Path
from typing import IO, Iterable, Iterator

from gateway.cli.parsers.daemon import PRIORITIES
from gateway.ops.logs import syslog_priority
from gateway.ops.process import home_from_env
from gateway.ops.unit import UNIT_NAME, unit_dir

LOG_FILE = Path("logs") / "chatgate.log"  # in the home
_CONTAINER_MARKS = (Path("/.dockerenv"), Path("/run/.containerenv"))
_JOURNAL_PREFIX = re.compile(r"<([0-7])>")
_TEXT_LEVEL = re.compile(r"\S+ \S+ (DEBUG|INFO|WARNING|ERROR|CRITICAL) ")  # gateway.ops.logs.TEXT_FORMAT


def logs(args: argparse.Namespace) -> int:
    user = _installed_unit(args.user)
    if user is not None:
        return _exec(["journalctl", *(["--user"] if user else []), "-u", UNIT_NAME.removesuffix(".service"),
                      "-n", str(args.lines), *(["-f"] if args.follow else []),
                      *(["-p", PRIORITIES[args.priority]] if args.priority is not None else [])])
    if args.user:
        print(f"chatgate logs: no chatgate user unit is installed (no {unit_dir(True) / UNIT_NAME}): "
              "`chatgate service install --user` makes one", file=sys.stderr)
        return 1
    file = home_from_env() / LOG_FILE
    if file.is_file():
        if args.priority is None:
            return _exec(["tail", "-n", str(args.lines), *(["-F"] if args.follow else []), str(file)])
        return _filtered_file(file, args)
    if _in_container():
        print("chatgate logs: inside a container chatgate's log is its output, which the host keeps: there run "
              "`docker compose -f deploy/compose.yaml logs -f chatgate` (or `docker logs -f CONTAINER`)",
              file=sys.stderr)
    else:
        print(f"chatgate logs: no chatgate unit is installed and there is no {file}: `chatgate run` logs to its "
              f"stderr (keep it with `chatgate run 2>>{file}`, or run it as a service: `chatgate service install`)",
              file=sys.stderr)
    return 1


def _installed_unit(user_only: bool) -> bool | None:
    """Which journal holds the daemon's lines: False the system's, True the user's, None no unit installed."""
    for user in ((True,) if user_only else (False, True)):
        if (unit_dir(user) / UNIT_NAME).is_file():
            return user
    return None


def _in_container() -> bool:
    return bool(os.environ.get("container")) or any(mark.exists() for mark in _CONTAINER_MARKS)


def _exec(argv: list[str]) -> int:
    """Become `argv` (its exit status is ours); 1 with one line when it is not installed."""
    found = shutil.which(argv[0])
    if found is None:
        print(f"chatgate logs: {argv[0]} is not installed here, and the log is read with it", file=sys.stderr)
        return 1
    sys.stdout.flush()
    os.execv(found, argv)


def line_priority(line: str) -> int | None:
    """The syslog priority a line of chatgate's log was written at (the text, JSON or journal format);
    None for a line that continues the one before it (a traceback's)."""
    if found := _JOURNAL_PREFIX.match(line):
        return int(found[1])
    level = None
    if line.startswith("{"):
        try:
            level = json.loads(line).get("level")
        except (ValueError, AttributeError):
            return None
    elif found := _TEXT_LEVEL.match(line):
        level = found[1]
    if not isinstance(level, str) or not isinstance(number := logging.getLevelName(level), int):
        return None
    return syslog_priority(number)


def _at_most(lines: Iterable[str], priority: int) -> Iterator[str]:
    """The lines of records at `priority` or more severe (a traceback goes with its record)."""
    shown = False
    for line in lines:
        found = line_priority(line)
        shown = found <= priority if found is not None else shown
        if shown:
            yield line


def _filtered_file(file: Path, args: argparse.Namespace) -> int:
    """The file's last `args.lines` lines at `args.priority` or above; then, with `-f`, those added to it
    from where the reading ended (`tail` follows it, across a rotation too)."""
    try:
        with file.open("rb") as raw:
            lines = (line.decode("utf-8", "replace") for line in raw)
            sys.stdout.writelines(deque(_at_most(lines, args.priority), maxlen=args.lines))
            read = raw.tell()
    except OSError as exc:
        print(f"chatgate logs: cannot read {file}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    sys.stdout.flush()
    if not args.follow:
        return 0
    if shutil.which("tail") is None:
        print("chatgate logs: tail is not installed here, and -f follows the file with it", file=sys.stderr)
        return 1
    with subprocess.Popen(["tail", "-c", f"+{read + 1}", "-F", str(file)], stdout=subprocess.PIPE, text=True,
                          errors="replace") as tail:
        try:
            _copy(_at_most(tail.stdout or (), args.priority), sys.stdout)
        except KeyboardInterrupt:
            tail.terminate()
            return 130
    return tail.returncode


def _copy(lines: Iterable[str], out: IO[str]) -> None:
    for line in lines:
        out.write(line)
        out.flush()
