"""`chatgate config show [--origin]`: the configuration chatgate runs with — the file, the variables
(the process's, `$CHATGATE_HOME/env`, `NAME_FILE` secrets) and the defaults merged — as YAML, every
secret masked; with `--origin`, one line per setting saying where its value came from."""

from __future__ import annotations

import argparse
from typing import Any

import yaml
from pydantic import BaseModel, SecretStr
from pydantic_core import to_jsonable_python

from gateway.config import Config

MASK = "********"  # a secret that is set (an empty one shows as "")


def _plain(node: Any) -> Any:
    """The settings as plain data, each secret masked."""
    if isinstance(node, SecretStr):
        return MASK if node.get_secret_value() else ""
    if isinstance(node, BaseModel):
        return {name: _plain(getattr(node, name)) for name in type(node).model_fields}
    if isinstance(node, dict):
        return {str(key): _plain(value) for key, value in node.items()}
    if isinstance(node, (list, tuple, set, frozenset)):
        return [_plain(value) for value in node]
    return to_jsonable_python(node)


def _leaves(node: Any, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    if isinstance(node, dict) and node:
        return [leaf for key, value in node.items() for leaf in _leaves(value, (*path, key))]
    return [(path, node)]


async def show(config: Config, args: argparse.Namespace) -> int:
    data = _plain(config)
    if not args.origin:
        print(yaml.safe_dump(data, sort_keys=False, allow_unicode=True), end="")
        return 0
    for path, value in _leaves(data):
        shown = yaml.safe_dump(value, default_flow_style=True, allow_unicode=True, width=1_000_000)
        print(f"{'.'.join(path)}: {shown.strip().removesuffix('...').strip()}  # {config.origin(path)}")
    return 0
