"""`chatgate completion bash|zsh`: a completion script for the shell, written by shtab from the
parser itself, so it always knows every command and option.

shtab rather than argcomplete: shtab writes a static script that the shell runs on its own, while
argcomplete starts Python (and chatgate's parser) on every TAB. This module, and so shtab, is
imported by this command only (shtab's imports cost about 30 ms, most of them importlib.metadata).
"""

from __future__ import annotations

import argparse

import shtab

from gateway.cli.dispatch import PATH
from gateway.cli.parsers import build, commands


def completion(args: argparse.Namespace) -> int:
    parser = build()
    for command in (parser, *(command for _, command in commands(parser))):
        for action in command._actions:
            if getattr(action, "completes", None) == PATH:
                action.complete = shtab.FILE  # type: ignore[attr-defined]
    print(shtab.complete(parser, shell=args.shell), end="")
    return 0
