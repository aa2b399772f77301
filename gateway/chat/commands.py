"""Chat commands: the registry (each command's handler, when it acts, whether it is limited, its menu line)
and the parsing of a message's text.

A message's text is parsed once, at intake (`Inbound` calls `Registry.parse`); the parsed `Command`
(or None: an ordinary message) rides on the work item. A command that acts at once runs as soon as
it is stored, even while a turn runs; the others wait their turn in the session's queue, whose
worker runs them (`command_handlers.Commands.run`) and `Turns.run` for everything else. The
handlers are registered in `gateway.chat.command_handlers`: adding a command is writing its handler there.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Generic, TypeVar

if TYPE_CHECKING:
    from platforms.base import PlatformAdapter

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Answer:
    """What a command says back. `acted` False: it did nothing (nothing running, nothing waiting, not
    the person's to decide) — such an answer goes unsaid for someone over their limit (`throttled`)."""

    text: str
    acted: bool = True


C = TypeVar("C")  # what a handler is given (`gateway.chat.command_handlers.Call`)
Handler = Callable[[C], Awaitable[Answer]]


@dataclass(frozen=True, slots=True)
class CommandSpec(Generic[C]):
    name: str
    description: str  # its line in the platforms' command menus and in /help
    handler: Handler[C]
    at_once: bool  # acts as soon as it is stored, even while a turn runs; False: waits its turn in the queue
    throttled: bool  # counts toward `gateway.max_commands_per_minute`, beyond which it is refused; False:
    # never refused (stopping, answering a request), but one that did nothing goes unanswered beyond it


@dataclass(frozen=True, slots=True)
class Command:
    """A message's text parsed as `/name[@bot] args`; `spec` None: no such command."""

    name: str
    args: str
    spec: CommandSpec[Any] | None = field(default=None, compare=False, repr=False)

    @property
    def known(self) -> bool:
        return self.spec is not None

    @property
    def immediate(self) -> bool:
        """Acts at once: an unknown command too (its answer is the help, never queued behind a turn)."""
        return self.spec is None or self.spec.at_once

    @property
    def throttled(self) -> bool:
        return self.spec is None or self.spec.throttled


class Registry(Generic[C]):
    """The commands by name, in their menu order (python-telegram-bot's handler table, in small)."""

    def __init__(self) -> None:
        self._specs: dict[str, CommandSpec[C]] = {}

    def command(self, name: str, description: str, *, at_once: bool,
                throttled: bool = True) -> Callable[[Handler[C]], Handler[C]]:
        """Register the decorated handler as `/name`."""
        def register(handler: Handler[C]) -> Handler[C]:
            self._add(CommandSpec(name, description, handler, at_once, throttled))
            return handler
        return register

    def alias(self, name: str, of: str, description: str) -> None:
        """`/name` does what `/of` does."""
        spec = self._specs[of]
        self._add(CommandSpec(name, description, spec.handler, spec.at_once, spec.throttled))

    def _add(self, spec: CommandSpec[C]) -> None:
        if spec.name in self._specs:
            raise ValueError(f"/{spec.name} is registered twice")
        self._specs[spec.name] = spec

    def parse(self, text: str) -> Command | None:
        """`/name[@bot] args` → Command; anything else (including a bare "/" or a path) → None."""
        if not text.startswith("/") or len(text) < 2 or text[1].isspace() or text[1] == "/":
            return None
        head, *rest = text[1:].split(maxsplit=1)  # "/deny 3\nreason": any whitespace ends the name
        name = head.split("@", 1)[0].strip().lower()
        if not name or "/" in name:
            return None  # a path such as /usr/bin is not a command
        return Command(name, rest[0].strip() if rest else "", self._specs.get(name))

    def named(self, name: str, args: str = "") -> Command:
        """The registered `/name` with `args`, as if typed (a bare "yes" stands for /approve)."""
        return Command(name, args, self._specs[name])

    def menu(self) -> dict[str, str]:
        """Name → description, for the platforms' command menus."""
        return {name: spec.description for name, spec in self._specs.items()}

    async def offer_menu(self, adapter: "PlatformAdapter") -> None:
        """A platform is up (at start, or later after tries): its command menu."""
        try:
            await adapter.set_commands(self.menu())
        except Exception as exc:  # (a menu is a nicety: the platform serves without it)
            log.warning("%s: could not register the chat commands: %s", adapter.name, exc)

    def help_text(self) -> str:
        return "Commands:\n" + "\n".join(f"/{name} — {what}" for name, what in self.menu().items())

    def unknown_text(self, command: Command) -> str:
        return f"Unknown command /{command.name}. " + self.help_text()
