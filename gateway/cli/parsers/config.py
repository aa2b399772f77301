"""`chatgate config show [--origin]`: the configuration in effect."""

from __future__ import annotations

from typing import Any

from gateway.cli.dispatch import handled_by


def add_parsers(sub: Any) -> None:
    config = sub.add_parser("config", help="the configuration in effect (secrets masked)")
    handled_by(config, "gateway.cli.config_show:show")
    config_sub = config.add_subparsers(dest="action", required=True)
    show = config_sub.add_parser("show", help="every setting with its value in effect: the file, the variables "
                                              "and the defaults merged, secrets masked")
    show.add_argument("--origin", action="store_true",
                      help="say where each value came from: a variable (and the file it was read from), the "
                           "config file, or the default")
