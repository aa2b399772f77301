"""The `chatgate` command line's parser, built from one light module per group of commands.

A group module holds argparse definitions only: `add_parsers(sub)` adds its commands and names,
with `handled_by`, the function that runs each one (imported once that command is chosen). It
imports nothing heavier than argparse, so building the whole parser stays cheap for every command.
A new group is one more module here and one more entry in GROUPS (the order is the help's).
"""

from __future__ import annotations

import argparse
from typing import Any, Iterator, Sequence

from gateway.cli.dispatch import a_path
from gateway.cli.parsers import board, completion, config, cron, daemon, learning, service, state, storage

GROUPS = (daemon, config, state, storage, cron, board, learning, service, completion)


class _Version(argparse.Action):
    """`--version`: the installed package's version, looked up only when asked for (reading the
    package metadata costs more than building the rest of the parser)."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        from importlib.metadata import PackageNotFoundError, version

        try:
            print(f"chatgate {version('chatgate')}")
        except PackageNotFoundError:  # run from a checkout that was never installed
            print("chatgate (version unknown: not installed as a package)")
        parser.exit()


def build() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="chatgate", description="One AI agent in your chats.")
    parser.add_argument("--version", action=_Version, help="print chatgate's version and exit")
    a_path(parser.add_argument("--config", help="config file (default: $CHATGATE_HOME/config.yaml)"))
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")  # none given: the help (gateway.cli.main)
    for group in GROUPS:
        group.add_parsers(sub)
    return parser


def commands(parser: argparse.ArgumentParser,
             words: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    """Every command's parser at every depth, with the words that choose it (("cron", "list"), …)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, command in action.choices.items():
                yield (*words, name), command
                yield from commands(command, (*words, name))
