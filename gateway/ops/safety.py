"""The settings in force that give protection up, each named with what it gives up: `chatgate
doctor` lists them, `chatgate run` warns about running as root."""

from __future__ import annotations

import os

from agent.safety.sandbox import Sandbox
from gateway.config import Config

AS_ROOT = ("chatgate runs as root: a command run outside the sandbox (approved, or with no sandbox) can do "
           "anything on this machine, and a sandboxed one can still read every file only root may read "
           "outside the hidden folders; run it as an ordinary user (systemd: User=, Docker: --user)")
UNCONFINED = "chatgate's config, tokens and database, every file chatgate may change, and the network"


def running_as_root() -> bool:
    return os.geteuid() == 0


def safety_report(config: Config, box: Sandbox) -> list[tuple[str, str]]:
    """(status, line) for the sandbox and for every weaker setting in force; status "FAIL" when the
    gateway will not start so. `box` has been probed (`box.active`)."""
    found: list[tuple[str, str]] = []
    sandboxed = box.active
    if sandboxed:
        found.append(("warn" if box.weaker else " ok ", f"tool sandbox: {box.describe()}"))
    elif box.required:
        found.append(("FAIL", f"tool sandbox: {box.describe()}"))
    else:
        found.append(("warn", (f"tool sandbox: {box.describe()} — so a command that runs reaches {UNCONFINED}; "
                               "only the approval checks stand in between")))
    sandbox = config.agent.sandbox
    if sandbox.network == "on" and box.mode != "off":
        found.append(("warn", ("agent.sandbox.network: on — sandboxed commands reach the network: whatever they "
                               "can read in the workspace can be sent anywhere without a person's yes")))
    if sandbox.unconfined == "classifier":
        when = "now (no sandbox)" if not sandboxed else "whenever the sandbox is not available"
        found.append(("warn", (f"agent.sandbox.unconfined: classifier — {when}, a command the classifier calls "
                               f"safe runs unasked and reaches {UNCONFINED}; the classifier is a list of known "
                               "dangers, and what it misses (code runners, obfuscated commands) runs too")))
    if config.approvals.mode == "off":
        found.append(("warn", ("approvals.mode: off — dangerous commands run without asking anyone "
                               "(only hardline ones are refused)")))
    if running_as_root():
        found.append(("warn", AS_ROOT))
    if problem := config.workspace_problem():
        found.append(("FAIL", f"{problem} — chatgate run refuses to start"))
    return found
