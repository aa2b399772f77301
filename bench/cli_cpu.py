"""The CPU time of `chatgate` commands, this checkout against another, in alternation. Prints; asserts nothing.

    .venv/bin/python bench/cli_cpu.py --base /tmp/other-checkout [--rounds 10]

Each command runs as the console script runs it (`gateway.cli.launch.main`, else `gateway.cli.main` where a
revision has no launch module), from this venv, with the checkout's own code first on the path (the
editable install's import hook is set aside, as in paired_ab.sh). A round runs every command once on
each side, the side that goes first alternating, so a slow phase of the shared machine falls on both.
What is counted is the child's user + system CPU (os.wait4), not the wall time. The commands share one
home, made once by `chatgate cron list` (no config file: the defaults). Both trees are compiled first,
as an installed package is (without bytecode every import compiles its source).
"""

from __future__ import annotations

import argparse
import compileall
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

COMMANDS = (["--version"], ["--help"], ["approvals", "check", "ls -la"], ["status"], ["cron", "list"])
RUN_AT = """
import sys
root = sys.argv.pop(1)
sys.meta_path = [f for f in sys.meta_path if "editable" not in repr(f).lower()]
sys.path.insert(0, root)
try:
    from gateway.cli.launch import main
except ImportError:
    from gateway.cli import main
sys.exit(main(sys.argv[1:]))
"""


def cpu_seconds(root: Path, args: list[str], env: dict[str, str]) -> float:
    """One run's user + system CPU, in seconds."""
    child = subprocess.Popen([sys.executable, "-c", RUN_AT, str(root), *args], env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, _, usage = os.wait4(child.pid, 0)
    child.returncode = 0  # (reaped here)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--base", required=True, type=Path, help="the other checkout (e.g. a git worktree of main)")
    ap.add_argument("--rounds", type=int, default=10)
    args = ap.parse_args()
    this, base = Path(__file__).resolve().parent.parent, args.base.resolve()
    for root in (this, base):
        for package in ("gateway", "agent", "platforms"):
            compileall.compile_dir(root / package, quiet=1)
    with tempfile.TemporaryDirectory() as scratch:
        env = {k: v for k, v in os.environ.items() if not k.startswith("CHATGATE_") and k != "PYTHONDONTWRITEBYTECODE"}
        env["CHATGATE_HOME"] = str(Path(scratch) / "home")
        cpu_seconds(this, ["cron", "list"], env)  # the home, made by chatgate once
        times: dict[tuple[str, str], list[float]] = {}
        for round_ in range(args.rounds):
            for command in COMMANDS:
                sides = [("this", this), ("base", base)]
                for side, root in sides if round_ % 2 == 0 else sides[::-1]:
                    times.setdefault((" ".join(command), side), []).append(cpu_seconds(root, command, env))
    print(f"CPU (user + system), median of {args.rounds} paired runs; base: {base}")
    print(f"{'command':<26}{'base':>9}{'this':>9}{'this/base':>11}")
    for command in COMMANDS:
        name = " ".join(command)
        before, after = times[(name, "base")], times[(name, "this")]
        ratio = statistics.median(a / b for a, b in zip(after, before))
        print(f"{name:<26}{statistics.median(before):>8.3f}s{statistics.median(after):>8.3f}s{ratio:>10.2f}×")


if __name__ == "__main__":
    main()
