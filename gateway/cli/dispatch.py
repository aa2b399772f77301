"""What a command's parser declares for the rest of the command line: which function runs the
command, and which arguments are file paths (for shell completion).

The function is named as "module:function" and only the chosen command's module is imported. The
parser itself is built from light modules (gateway/cli/parsers/), so `chatgate --help` or `approvals
check` never load the event loop, the configuration, the database or the HTTP and LLM clients that
`run` needs (issue 34: every command paid 0.3 to 1 s of CPU for them).
"""

from __future__ import annotations

import argparse
import importlib
from typing import Any, Callable

PATH = "path"  # an argument's `completes`: the shell offers file names for it (gateway.cli.completion)


def handled_by(parser: argparse.ArgumentParser, target: str, *, config: bool = True) -> None:
    """`target` ("gateway.cli.cron:cron") runs the command chosen by `parser`. With `config` it is an
    async function of (config, args), run in an event loop once the configuration is read and
    logging set up; without, a plain function of (args) returning the exit status, which reads nothing.
    Set on the innermost parser that decides (a leaf's wins over its group's)."""
    parser.set_defaults(handler=target, needs_config=config)


def load(target: str) -> Callable[..., Any]:
    """The function a target names, its module imported now."""
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)  # type: ignore[no-any-return]


def a_path(argument: argparse.Action) -> None:
    """The argument is a file path: shell completion offers file names for it."""
    argument.completes = PATH  # type: ignore[attr-defined]
