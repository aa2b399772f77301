"""Chat commands: parsing and the help text. The runner decides what each one does."""

from __future__ import annotations

from dataclasses import dataclass

COMMANDS = {
    "new": "start a fresh session (the old one stays searchable)",
    "reset": "same as /new",
    "stop": "cancel the request that is running",
    "status": "show this session's state",
    "approve": "approve the waiting request: /approve [id]",
    "deny": "deny the waiting request: /deny [id] [reason]",
    "cron": "scheduled jobs: /cron list|pause|resume|remove|run [job]",
    "usage": "tokens used: this session, and yours today and in all",
    "goal": "work toward an objective across turns: /goal <objective>|status|pause|resume|clear",
    "subgoal": "add a criterion the goal must also meet: /subgoal <criterion>",
    "help": "list the commands",
}
# Handled at once, even while a turn runs; the others wait their turn in the session's queue.
CONTROL = frozenset({"stop", "status", "help", "approve", "deny", "cron", "usage", "goal", "subgoal"})


@dataclass(frozen=True, slots=True)
class Command:
    name: str
    args: str

    @property
    def known(self) -> bool:
        return self.name in COMMANDS

    @property
    def immediate(self) -> bool:
        return self.name in CONTROL or not self.known


def parse_command(text: str) -> Command | None:
    """`/name[@bot] args` → Command; anything else (including a bare "/") → None."""
    if not text.startswith("/") or len(text) < 2 or text[1].isspace() or text[1] == "/":
        return None
    head, *rest = text[1:].split(maxsplit=1)  # "/deny 3\nreason": any whitespace ends the name
    args = rest[0] if rest else ""
    name = head.split("@", 1)[0].strip().lower()
    if not name or "/" in name:
        return None  # a path such as /usr/bin is not a command
    return Command(name, args.strip())


def help_text() -> str:
    return "Commands:\n" + "\n".join(f"/{name} — {what}" for name, what in COMMANDS.items())


def unknown_text(command: Command) -> str:
    return f"Unknown command /{command.name}. " + help_text()
