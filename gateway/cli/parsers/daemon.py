"""`chatgate setup`, `run`, `doctor`, `status` and `logs`: the first configuration, the daemon,
the check before it, whether it is up, and what it wrote."""

from __future__ import annotations

import argparse
from typing import Any

from gateway.cli.dispatch import handled_by
from platforms.setup import setups

PRIORITIES = ("emerg", "alert", "crit", "err", "warning", "notice", "info", "debug")  # syslog's, 0 to 7


def add_parsers(sub: Any) -> None:
    handled_by(sub.add_parser("run", help="run the gateway in the foreground"), "gateway.cli.daemon:run")
    doctor = sub.add_parser("doctor", help="check the configuration, the LLM endpoint and each platform's token")
    doctor.add_argument("--timeout", type=_seconds, default=10.0, metavar="SECONDS",
                        help="how long each platform may take to answer (default 10)")
    handled_by(doctor, "gateway.cli.daemon:doctor")
    _setup(sub)
    status = sub.add_parser("status", help="is the daemon running, is it ready, what waits, what failed")
    status.add_argument("--json", action="store_true", help="print it as JSON")
    handled_by(status, "gateway.cli.status:status")
    logs = sub.add_parser("logs", help="the daemon's log: the journal under systemd, else its log file",
                          description="The daemon's log: `journalctl -u chatgate` when a chatgate unit is "
                          "installed, else $CHATGATE_HOME/logs/chatgate.log; inside a container, where to read it.")
    logs.add_argument("-f", "--follow", action="store_true", help="keep showing new lines (Ctrl-C stops)")
    logs.add_argument("-n", "--lines", type=_count, default=50, metavar="N", help="the last N lines (default 50)")
    logs.add_argument("-p", "--priority", type=_priority, metavar="PRIORITY",
                      help="this priority and more severe: emerg alert crit err warning notice info debug, or 0-7")
    logs.add_argument("--user", action="store_true", help="the user unit's journal (`service install --user`)")
    handled_by(logs, "gateway.cli.logs:logs", config=False)


def _count(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of lines")
    return int(text)


def _priority(text: str) -> int:
    """A syslog priority given as a name (`warning`) or a number (`4`)."""
    if text.isdigit() and int(text) < len(PRIORITIES):
        return int(text)
    if text.lower() in PRIORITIES:
        return PRIORITIES.index(text.lower())
    raise argparse.ArgumentTypeError(f"{text!r} is not a priority: one of {', '.join(PRIORITIES)} or 0-7")


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not 0 < value <= 600:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds between 0 and 600")
    return value


def option_dest(option: str) -> str:
    """Where argparse puts an option's value (`--slack-app-token` → `slack_app_token`)."""
    return option.lstrip("-").replace("-", "_")


def _setup(sub: Any) -> None:
    """`chatgate setup`'s options: the common ones, and each platform's own secrets as its `setup`
    module declares them (a light read: no config model, no SDK)."""
    setup = sub.add_parser(
        "setup", help="write config.yaml: the model endpoint, a platform and its token, you as admin (each tested)",
        description="Asks for what it needs on a terminal (what config.yaml already holds is the default), or takes "
                    "every answer as an option. Tests the model endpoint and the token, writes config.yaml (0600) and "
                    "offers to install the service. A key given as an option is seen by other local users while it "
                    "runs; OPENAI_API_KEY, TELEGRAM_BOT_TOKEN, DISCORD_BOT_TOKEN, SLACK_BOT_TOKEN and SLACK_APP_TOKEN "
                    "are taken as defaults instead.")
    handled_by(setup, "gateway.cli.setup:setup", config=False)  # (the config may not exist yet, or be wrong)
    setup.add_argument("--llm-base-url", metavar="URL", help="the OpenAI-compatible endpoint, e.g. "
                                                              "https://api.openai.com/v1")
    setup.add_argument("--llm-api-key", metavar="KEY", help="its API key (none for a local server)")
    setup.add_argument("--model", help="the model, e.g. gpt-4o-mini")
    known = setups()
    setup.add_argument("--platform", metavar="NAME", help=f"{', '.join(list(known)[:-1])} or {list(known)[-1]}")
    setup.add_argument("--token", help="the bot token (Slack: the xoxb- bot token)")
    for secret in (secret for platform in known.values() for secret in platform.secrets):
        setup.add_argument(secret.option, dest=option_dest(secret.option), metavar="TOKEN", help=secret.help)
    setup.add_argument("--api-url", metavar="URL", help="the platform's API address, when not its own (a "
                                                         "self-hosted Bot API server, a proxy)")
    setup.add_argument("--admin", metavar="ID", help="your user id on the platform: you become admin")
    setup.add_argument("--yes", action="store_true", help="ask nothing: what is not given is the current "
                                                          "config's, and the service is installed")
    setup.add_argument("--no-service", action="store_true", help="do not install the service")
    setup.add_argument("--force", action="store_true", help="replace an existing config file without asking "
                                                            "(a copy is kept as config.yaml.bak)")
    setup.add_argument("--unit-dir", help=argparse.SUPPRESS)  # tests: where `service install` writes the unit
