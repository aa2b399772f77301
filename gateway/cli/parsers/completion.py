"""`chatgate completion bash|zsh`: the shell completion script."""

from __future__ import annotations

from typing import Any

from gateway.cli.dispatch import handled_by

SHELLS = ("bash", "zsh")


def add_parsers(sub: Any) -> None:
    completion = sub.add_parser("completion", help="print the shell completion script (see the README to install it)")
    completion.add_argument("shell", choices=SHELLS)
    handled_by(completion, "gateway.cli.completion:completion", config=False)
