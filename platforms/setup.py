"""What `chatgate setup` needs of each platform, declared by the platform in `platforms/<name>/setup.py`
(`SETUP`): what it is called, the token it tests and the other secrets it asks for (each with its
question, its option and its config key), the keys it writes as they are, what a user id looks like
there, and — where the platform can tell — how to learn the person's id from a message to the bot.

Kept apart from the registry's `PlatformSpec` because the command line's parser reads it to offer
each platform's own options (`chatgate setup --help` lists them) and must stay light: this module,
each platform's `setup.py` and the packages holding them import nothing but the standard library
(no pydantic, no SDK; tests/test_cli_light.py pins it), and its classes are plain ones (NamedTuple
or dataclasses cost every command 1.5 ms or more at parse time). Helpers that talk to the platform are
named as "module:function" and imported only when setup calls them.
"""

from __future__ import annotations

import functools
import importlib
import os
from types import MappingProxyType
from typing import Any, Callable, Mapping

import platforms


class Secret:
    """A secret setup asks for and writes in the platform's section."""

    __slots__ = ("key", "question", "option", "help")

    def __init__(self, key: str, question: str, option: str = "--token", help: str = "") -> None:
        self.key = key  # the section's key it goes in
        self.question = question  # asked on a terminal (read without echo)
        self.option = option  # the option that gives it instead ("--token" is every platform's token)
        self.help = help  # that option's help (the parser declares --token's itself)


class FromMessage:
    """Learning the person's user id from a message they send the bot: setup shows a code, the person
    sends it, and the sender of the message holding it is offered as the admin."""

    __slots__ = ("sender", "how")

    def __init__(self, sender: str, how: Callable[[str | None, str], str]) -> None:
        # "module:function": async (section, code, wait) → (user id, who they are) of whoever sends the bot
        # `code` within `wait` seconds, or None; it raises when the bot's messages cannot be read
        self.sender = sender
        self.how = how  # (the bot's user name, the code) → what the person does, one line


class UserIds:
    """What a user id on the platform looks like, and how a person finds their own."""

    __slots__ = ("pattern", "example", "how_to_find", "from_message")

    def __init__(self, pattern: str, example: str, how_to_find: str, from_message: FromMessage | None = None) -> None:
        self.pattern = pattern  # a regular expression the whole id matches
        self.example = example
        self.how_to_find = how_to_find  # one line, shown when setup asks for it
        self.from_message = from_message  # when the platform can tell who sent the bot a message


class PlatformSetup:
    __slots__ = ("name", "title", "order", "token", "secrets", "fixed", "user_ids", "then")

    def __init__(self, name: str, title: str, *, order: int, token: Secret | None = None,
                 secrets: tuple[Secret, ...] = (), fixed: Mapping[str, Any] | None = None,
                 user_ids: UserIds | None = None, then: str | None = None) -> None:
        self.name = name  # the platform's name (its `platforms.<name>` section)
        self.title = title  # as people write it
        self.order = order  # its place in setup's list (the first with a token in a config file is its default)
        self.token = token  # the token setup tests; None: nothing to test (then no admin either)
        self.secrets = secrets  # asked for besides the token, after it
        self.fixed = MappingProxyType(dict(fixed or {}))  # keys written as they are (what setup supports of it)
        self.user_ids = user_ids  # None: no admin is asked for (everyone on it is, as on the local web chat)
        self.then = then  # what the person does once it runs (default: write to the bot on <title>)


def setups() -> dict[str, PlatformSetup]:
    """Every platform's setup declaration, by name, in setup's order."""
    return dict(_found())


@functools.cache
def _found() -> dict[str, PlatformSetup]:
    found: list[PlatformSetup] = []
    for name in _packages():
        try:
            declared = getattr(importlib.import_module(f"platforms.{name}.setup"), "SETUP", None)
        except ModuleNotFoundError as exc:
            if exc.name != f"platforms.{name}.setup":
                raise
            continue
        if isinstance(declared, PlatformSetup):
            found.append(declared)
    return {setup.name: setup for setup in sorted(found, key=lambda setup: (setup.order, setup.name))}


def _packages() -> list[str]:
    """The packages under `platforms/`, by a look at its folder (`pkgutil.iter_modules` would load
    `inspect`, which costs the command line more than all the rest of this)."""
    return sorted(entry.name for folder in platforms.__path__ for entry in os.scandir(folder)
                  if entry.is_dir() and os.path.isfile(os.path.join(entry.path, "__init__.py")))


def helper(name: str) -> Callable[..., Any]:
    """A "module:function" a declaration names, its module imported now."""
    module, _, function = name.partition(":")
    return getattr(importlib.import_module(module), function)  # type: ignore[no-any-return]
