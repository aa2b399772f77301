"""`chatgate service install|uninstall [--user] [--print]`: chatgate as a systemd service (start, stop,
restart and status of the installed unit: gateway/cli/systemctl.py)."""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

from gateway.cli.systemctl import systemctl
from gateway.config import Config
from gateway.ops.unit import UNIT_NAME, render_unit, service_account, unit_dir


async def service(config: Config, args: argparse.Namespace) -> int:
    folder = Path(args.unit_dir) if args.unit_dir else unit_dir(args.user)
    path = folder / UNIT_NAME
    journal = f"journalctl {'--user ' if args.user else ''}-u chatgate -f"
    try:
        if args.action == "install":
            account, invoker_home = service_account() if not args.user else (None, None)
            home = invoker_home if invoker_home and "CHATGATE_HOME" not in os.environ else config.home
            workspace = config.agent.workspace.expanduser() if config.agent.workspace else home / "workspace"
            text = render_unit(home=home, user=args.user, drain_seconds=config.gateway.drain_seconds,
                               writable=[] if workspace.is_relative_to(home) else [workspace], account=account,
                               config_file=Path(args.config).resolve() if args.config else None)
            if args.print_only:
                print(text, end="")
                return 0
            for folder_ in dict.fromkeys([home, workspace]):
                folder_.mkdir(parents=True, exist_ok=True, mode=0o700)
                if account and os.geteuid() == 0:  # (made by root for the person behind sudo)
                    shutil.chown(folder_, account)
            folder.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            systemctl(args.user, "daemon-reload")
            systemctl(args.user, "enable", "--now", UNIT_NAME)
            print(f"installed {path}; chatgate is starting and restarts if it fails.\nfollow it: {journal}")
            if args.user:
                print("to keep it running after you log out: loginctl enable-linger $USER")
            return 0
        if path.exists():
            systemctl(args.user, "disable", "--now", UNIT_NAME)
            path.unlink()
            systemctl(args.user, "daemon-reload")
            print(f"removed {path}; the state is kept")
        else:
            print(f"no unit at {path}: nothing to remove")
        return 0
    except (OSError, RuntimeError) as exc:
        print(f"chatgate service {args.action}: {exc}", file=sys.stderr)
        return 1
