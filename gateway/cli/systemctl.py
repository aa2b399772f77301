"""`chatgate service start|stop|restart|status [--user]`: the installed unit, through systemctl.

`start`, `stop` and `restart` read no configuration (a config being repaired does not keep the
service from being stopped); `status` shows systemd's view, then chatgate's own (`chatgate status`:
running, ready, each platform, what waits). `install` and `uninstall` are in gateway/cli/service.py.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from gateway.ops.unit import UNIT_NAME, unit_dir

DONE = {"start": "started", "stop": "stopped (running turns finished first)", "restart": "restarted"}


def systemctl(user: bool, *args: str, capture: bool = True) -> subprocess.CompletedProcess[str]:
    """`systemctl [--user] ARGS`; RuntimeError with systemctl's own words when it fails (`capture`), or
    when there is no systemctl. Without `capture` its output goes to ours and its status is returned."""
    command = ["systemctl", *(["--user"] if user else []), *args]
    if shutil.which("systemctl") is None:
        raise RuntimeError("systemctl is not here: this machine does not run systemd (use Docker, see the README)")
    done = subprocess.run(command, capture_output=capture, text=True)
    if capture and done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed: {(done.stderr or done.stdout).strip()}")
    return done


def installed_unit(args: argparse.Namespace) -> Path:
    """The unit `chatgate service install` wrote, or RuntimeError saying how to get one."""
    path = (Path(args.unit_dir) if args.unit_dir else unit_dir(args.user)) / UNIT_NAME
    if not path.is_file():
        other = "" if args.unit_dir else _other_hint(args.user)
        raise RuntimeError(f"no chatgate unit is installed (no {path}): `chatgate service install"
                           f"{' --user' if args.user else ''}` makes one{other}")
    return path


def _other_hint(user: bool) -> str:
    return f"; there is a {'system' if user else 'user'} unit: {'without' if user else 'add'} --user" \
        if (unit_dir(not user) / UNIT_NAME).is_file() else ""


def control(args: argparse.Namespace) -> int:
    """start, stop or restart the unit (systemctl waits for a `Type=notify` unit to say it is ready)."""
    try:
        installed_unit(args)
        systemctl(args.user, args.action, UNIT_NAME)
    except (OSError, RuntimeError) as exc:
        print(f"chatgate service {args.action}: {exc}", file=sys.stderr)
        return 1
    follow = f"chatgate logs{' --user' if args.user else ''} -f"
    print(f"chatgate {DONE[args.action]}" + ("" if args.action == "stop" else f"; follow it: {follow}"))
    return 0


async def status(config: Any, args: argparse.Namespace) -> int:
    """systemd's status of the unit, then chatgate's own; the exit status is `chatgate status`'s."""
    from gateway.cli.status import status as chatgate_status

    try:
        installed_unit(args)
        systemctl(args.user, "status", "--no-pager", UNIT_NAME, capture=False)  # (3: not active; said in it)
    except (OSError, RuntimeError) as exc:
        print(f"chatgate service status: {exc}", file=sys.stderr)
        return 1
    print(flush=True)
    return await chatgate_status(config, args)
