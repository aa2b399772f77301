"""Where the agent's commands run: inside bubblewrap when it works here.

Inside the sandbox the workspace is the only place that can be written; the rest of the system
is read-only; chatgate's own state (`CHATGATE_HOME`, the config file's folder), the user's home,
`/root`, `/home`, `/tmp` and `/run` (sockets of the Docker daemon, D-Bus, systemd) are empty; the
command has its own PID namespace (no `/proc` of the gateway, nothing to signal outside) and no
network unless `agent.sandbox.network: on`. When the command ends the namespace ends, and with it
everything the command started (`setsid`, `nohup`, a daemonising server included).

The command keeps no capability, even when chatgate runs as root (bubblewrap started by root
would otherwise leave them, and `umount` would lift the hiding), runs with no_new_privs (a setuid
binary gains nothing), and cannot make user namespaces of its own where bubblewrap supports
`--disable-userns` (0.8 and later; the trial run finds out, once). `/proc/sys` and
`/proc/sysrq-trigger` are read-only: root needs no capability to write a sysctl, and
`kernel.core_pattern` set to `|program` has the kernel run that program as root outside.

`mode: auto` uses bubblewrap where a trial run works and otherwise runs commands as before —
and says so loudly (a warning at start, `chatgate doctor`, and `describe()`); `mode: bwrap`
refuses to run commands without it; `mode: off` never uses it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

log = logging.getLogger(__name__)

HIDDEN_ALWAYS = (Path("/root"), Path("/home"), Path("/tmp"), Path("/var/tmp"), Path("/run"))
# the strongest first: the first one bubblewrap accepts here is used
HARDENING = (("--unshare-user", "--disable-userns", "--cap-drop", "ALL"),
             ("--cap-drop", "ALL"))
NO_NESTED_USERNS = "--disable-userns"
# what stays read-only in the sandbox's /proc (bubblewrap's own cover misses /proc/sys for root)
PROC_READ_ONLY = ("--ro-bind-try", "/proc/sys", "/proc/sys", "--ro-bind-try", "/proc/sysrq-trigger",
                  "/proc/sysrq-trigger")


@dataclass
class Sandbox:
    """How commands are confined. `hidden`: folders (or single files) whose contents the command must
    not see."""

    mode: str = "auto"  # auto | bwrap | off
    network: bool = False
    hidden: Sequence[Path] = ()
    _works: bool | None = field(default=None, init=False)
    _why_not: str = field(default="", init=False)
    _hardening: tuple[str, ...] = field(default=HARDENING[0], init=False)
    _weaker: str = field(default="", init=False)  # why the strongest hardening is not in use

    @property
    def active(self) -> bool:
        """True when commands run inside bubblewrap."""
        if self.mode == "off":
            return False
        if self._works is None:
            self._works, self._why_not, self._hardening, self._weaker = _probe()
            if not self._works:
                level = logging.ERROR if self.mode == "bwrap" else logging.WARNING
                log.log(level, "tool sandbox: bubblewrap does not work here (%s); %s", self._why_not,
                        "commands are refused (agent.sandbox.mode: bwrap)" if self.mode == "bwrap"
                        else "commands run WITHOUT a sandbox, with chatgate's own rights")
            elif self._weaker:
                log.warning("tool sandbox: %s", self._weaker)
        return self._works

    async def ready(self) -> bool:
        """`active`, with the one-time trial run off the event loop."""
        if self.mode != "off" and self._works is None:
            await asyncio.to_thread(lambda: self.active)
        return self.active

    @property
    def required(self) -> bool:
        return self.mode == "bwrap"

    @property
    def weaker(self) -> str:
        """What the sandbox in use cannot forbid that a newer bubblewrap would ("" when nothing)."""
        return self._weaker if self.active else ""

    def describe(self) -> str:
        """One line for people: what commands run in."""
        if self.mode == "off":
            return "off (agent.sandbox.mode: off): commands run with chatgate's own rights"
        if self.active:
            return (f"bubblewrap, network {'on' if self.network else 'off'}, no capabilities, "
                    + (f"BUT {self._weaker}" if self._weaker else "no user namespaces of its own"))
        return f"NOT available ({self._why_not}): " + ("commands are refused" if self.required
                                                      else "commands run with chatgate's own rights")

    def wrap(self, argv: Sequence[str], workspace: Path) -> list[str]:
        """`argv` run inside the sandbox, in `workspace`."""
        if self._works is None:
            self.active  # noqa: B018 - the trial run decides the hardening options
        workspace = Path(os.path.realpath(workspace))
        hidden = sorted({Path(os.path.realpath(p)) for p in (*HIDDEN_ALWAYS, *self.hidden)},
                        key=lambda p: len(p.parts))
        args = [_bwrap() or "bwrap", "--die-with-parent", "--new-session", "--unshare-all", *self._hardening,
                *(["--share-net"] if self.network else []),
                "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", *PROC_READ_ONLY]
        outside = [p for p in hidden if not p.is_relative_to(workspace)]
        inside = [p for p in hidden if p.is_relative_to(workspace) and p != workspace]
        for path in outside:  # first the hiding, then the workspace on top, then what hides inside it
            args += _hide(path)
        args += ["--bind", str(workspace), str(workspace)]
        for path in inside:
            args += _hide(path)
        args += ["--chdir", str(workspace), "--setenv", "TMPDIR", "/tmp", "--", *argv]
        return args


def _hide(path: Path) -> list[str]:
    """bwrap options that hide `path`: an empty tmpfs on a folder; on a file, /dev/null's node on a
    nodev mount, which nobody inside can open."""
    if path.is_dir():
        return ["--tmpfs", str(path)]
    if path.exists():
        return ["--ro-bind", "/dev/null", str(path)]
    return []


def _bwrap() -> str | None:
    return shutil.which("bwrap")


def _probe() -> tuple[bool, str, tuple[str, ...], str]:
    """Whether bubblewrap can build a sandbox here (user namespaces, mounts), the reason if not,
    the strongest hardening options it accepts, and what is given up when not the strongest."""
    binary = _bwrap()
    if binary is None:
        return False, "bwrap is not installed (Debian/Ubuntu: apt-get install bubblewrap)", HARDENING[0], ""
    failures: list[str] = []
    for hardening in HARDENING:
        try:
            done = subprocess.run([binary, "--die-with-parent", "--unshare-all", *hardening, "--ro-bind", "/", "/",
                                   "--dev", "/dev", "--proc", "/proc", *PROC_READ_ONLY, "--tmpfs", "/tmp", "true"],
                                  capture_output=True, text=True, timeout=10, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return False, f"bwrap could not run: {exc}", HARDENING[0], ""
        if done.returncode == 0:
            weaker = "" if NO_NESTED_USERNS in hardening else (
                f"commands may make user namespaces of their own ({NO_NESTED_USERNS} refused: "
                f"{failures[0]}; bubblewrap 0.8 or later forbids them)")
            return True, "", hardening, weaker
        failures.append((done.stderr.strip().splitlines() or [f"exit code {done.returncode}"])[-1][:200])
    return False, failures[-1], HARDENING[0], ""
