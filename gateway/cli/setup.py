"""`chatgate setup`: the model endpoint and one platform, each tested before anything is written; the
person's own user id made admin; then `config.yaml` (mode 0600) and, when the person agrees, the
service.

Every answer can be given as an option. On a terminal the others are asked, each offering as its
default what the config file already holds (else the usual environment variable: OPENAI_API_KEY,
TELEGRAM_BOT_TOKEN…); a secret is read without echo and never shown. Without a terminal (or with
`--yes`) nothing is asked: a missing answer is an error that lists the options to give, before
anything is tested. An existing file is replaced only when the person says so (`--force` without a
terminal), and a copy of it is kept beside it. Under sudo it is written for the person behind sudo
(in their home unless CHATGATE_HOME says otherwise, and owned by them), as `service install` runs it.

The keys and tokens go in `config.yaml` itself, not in `$CHATGATE_HOME/env`: it is the one file every
command reads (`chatgate run` by hand, `doctor`, the service), a rerun finds them there as defaults,
and it is written 0600 in the home (0700 when setup makes it), which the agent's tools never see.
The heavy clients (the LLM client, the platform's SDK) are imported only to test an answer.
"""

from __future__ import annotations

import argparse
import getpass
import os
import sys
from pathlib import Path
from typing import Any, Callable, TypeVar

from gateway.cli.setup_files import Stop, install_service, merged, read_config, write_config
from gateway.cli.parsers.daemon import option_dest
from gateway.cli.setup_platforms import (api_address_key, configured_platform, id_problem, platform_env, section_model,
                                         section_of, start_code)
from platforms.setup import FromMessage, Secret, helper, setups

T = TypeVar("T")
ADMIN_WAIT = 300.0  # s: how long setup waits for the person's message to the bot, where it can read one


class Asker:
    """Answers: an option's value when given (used once), else asked on the terminal with a default,
    else — without a terminal — the default, or noted as missing."""

    def __init__(self, given: dict[str, str], interactive: bool) -> None:
        self.given = given  # option ("--model") → its value
        self.interactive = interactive
        self.missing: list[str] = []
        self.later: list[Callable[[], None]] = []  # tests to make once every answer is known (no terminal)

    def text(self, option: str, question: str, default: str | None = None, *, secret: bool = False,
             required: bool = True, check: Callable[[str], str | None] | None = None) -> str | None:
        value = self.given.pop(option, None)
        if value is not None:
            if check is not None and (problem := check(value)):
                raise Stop(f"chatgate setup: {option}: {problem}", 2)
            return value
        if not self.interactive:
            if default is None and required:
                self.missing.append(option)
            return default
        while True:
            if secret:
                answer = getpass.getpass(f"{question}{' (Enter keeps the current one)' if default else ''}: ").strip()
            else:
                answer = input(f"{question}{f' [{default}]' if default else ''}: ").strip()
            if not answer and (default is not None or not required):
                return default
            problem = "an answer is needed here" if not answer else check(answer) if check else None
            if problem is None:
                return answer
            print(f"  {problem}")

    def confirm(self, question: str, default: bool) -> bool:
        while True:
            answer = input(f"{question} [{'Y/n' if default else 'y/N'}]: ").strip().lower()
            if not answer:
                return default
            if answer in ("y", "yes", "n", "no"):
                return answer.startswith("y")

    def until_it_works(self, answer: Callable[[T | None], T], test: Callable[[T], str | None]) -> T:
        """Answers that pass `test`: on a terminal asked again (defaulting to the last ones) until they do;
        without one, tested once every answer is known (a failure ends the setup)."""
        values: T | None = None
        while True:
            values = answer(values)
            if not self.interactive:
                self.later.append(lambda: _passes(test, values))
                return values
            if (problem := test(values)) is None:
                return values
            print(f"  {problem}\n  (again; Ctrl-C stops, nothing is written)")


def _passes(test: Callable[[T], str | None], values: T) -> None:
    if (problem := test(values)) is not None:
        raise Stop(f"chatgate setup: {problem}")


def _url_problem(url: str) -> str | None:
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    return None if parts.scheme in ("http", "https") and parts.hostname else "not an http(s) URL"


def _env(name: str) -> str | None:
    return os.environ.get(name) or None


def _llm(ask: Asker, data: dict[str, Any]) -> dict[str, Any]:
    current = data.get("llm") if isinstance(data.get("llm"), dict) else {}

    def answer(last: dict[str, Any] | None) -> dict[str, Any]:
        was = last or {"base_url": current.get("base_url") or _env("OPENAI_BASE_URL"),
                       "api_key": current.get("api_key") or _env("OPENAI_API_KEY"),
                       "model": current.get("model") or _env("CHATGATE_MODEL")}
        return {"base_url": ask.text("--llm-base-url", "Model endpoint, OpenAI-compatible (e.g. "
                                     "https://api.openai.com/v1; Ollama: http://localhost:11434/v1)", was["base_url"],
                                     check=_url_problem),
                "api_key": ask.text("--llm-api-key", "API key (Enter: none, for a local server)", was["api_key"],
                                    secret=True, required=False),
                "model": ask.text("--model", "Model (e.g. gpt-4o-mini; on Ollama e.g. llama3.1)", was["model"])}

    return ask.until_it_works(answer, _llm_problem)


def _llm_problem(values: dict[str, Any]) -> str | None:
    import asyncio

    from agent.endpoint import redacted
    from gateway.ops.probes import check_llm

    print(f"testing {redacted(values['base_url'])} …")
    lines = asyncio.run(check_llm(values["base_url"], values["api_key"], values["model"]))
    for status, text in lines:
        print(f"  {'ok' if status == ' ok ' else 'note' if status == 'warn' else 'FAIL'}: {text}")
    return next((text for status, text in lines if status == "FAIL"), None)


def _platform(ask: Asker, data: dict[str, Any]) -> dict[str, Any]:
    """The platform's section as it will be written, with its name under "platform" (and the bot's
    user name under "username", once tested)."""
    address = ask.given.pop("--api-url", None)
    known = setups()
    names = ", ".join(known)
    tokenless = " or ".join(setup.name for setup in known.values() if setup.token is None)

    def answer(last: dict[str, Any] | None) -> dict[str, Any]:
        name = ask.text("--platform", f"Platform ({names})", (last or {}).get("platform") or configured_platform(data),
                        check=lambda v: None if v in known else f"choose one of {names}")
        if name is None:  # (no terminal: its token and id are missing too, unless it needs none)
            ask.missing[-1] = f"--platform (with its --token and --admin, unless {tokenless})"
            return {"platform": None}
        setup = known[name]
        if setup.token is None:
            return {"platform": name, **setup.fixed}
        env, key = platform_env(name), api_address_key(name)
        current = section_of(data, name)
        if last and last.get("platform") == name:  # (asked again: what was typed is the default)
            current = {**current, **last}
        values = {"platform": name, **_secret(ask, setup.token, current, env), **setup.fixed}
        for secret in setup.secrets:
            values.update(_secret(ask, secret, current, env))
        if address or current.get(key):
            values[key] = address or current.get(key)
        return values

    return ask.until_it_works(answer, lambda values: _platform_problem(values, data))


def _secret(ask: Asker, secret: Secret, current: dict[str, Any], env: dict[str, str]) -> dict[str, Any]:
    return {secret.key: ask.text(secret.option, secret.question, current.get(secret.key) or env.get(secret.key),
                                 secret=True)}


def _platform_problem(values: dict[str, Any], data: dict[str, Any]) -> str | None:
    import asyncio

    from gateway.ops.probes import probe

    if setups()[values["platform"]].token is None:  # (nothing to test)
        return None
    print(f"testing the {values['platform']} token …")
    verdict = asyncio.run(probe(values["platform"], section_model(values, data)))
    if verdict is None or not verdict.ok:
        return verdict.text if verdict else None
    print(f"  ok: {verdict.text}")
    values["username"] = verdict.username
    return None


def _admin(ask: Asker, data: dict[str, Any], platform: dict[str, Any]) -> str | None:
    """The person's own user id on the platform (None where there is no admin to name: on the local web
    chat everyone is)."""
    name = platform["platform"]
    setup = setups().get(name)  # (None: no platform was given, and there is no terminal to ask on)
    if setup is None or setup.user_ids is None:
        return None
    admins = (data.get("access") or {}).get("admins") or {}
    current = admins.get(name) if isinstance(admins, dict) else None
    default = str(current[0]) if isinstance(current, list) and current else None
    check = lambda value: id_problem(setup, value)  # noqa: E731
    question = f"Your {setup.title} user id, to make you chatgate's admin"
    if ask.interactive and default is None and "--admin" not in ask.given:
        if setup.user_ids.from_message is not None and setup.token is not None:
            found = ask.text("--admin", f"{question} (Enter: find it by sending the bot a message)",
                             required=False, check=check)
            if found is not None or (found := _sender_id(ask, setup.user_ids.from_message, setup.token.key, platform,
                                                         data)) is not None:
                return found
        print(f"  to find it — {setup.user_ids.how_to_find}")
    return ask.text("--admin", question, default, check=check)


def _sender_id(ask: Asker, finder: FromMessage, token_key: str, platform: dict[str, Any],
               data: dict[str, Any]) -> str | None:
    """The id of the person who sends the bot a code shown here (asked to confirm), or None."""
    import asyncio

    code = start_code()
    print(f"  {finder.how(platform.get('username'), code)}\n  waiting for it (up to {ADMIN_WAIT / 60:.0f} minutes; "
          "Ctrl-C to type your id instead) …")
    section = section_model(platform, data)
    try:
        found = asyncio.run(helper(finder.sender)(section, code, ADMIN_WAIT))
    except KeyboardInterrupt:
        print()
        return None
    except Exception as exc:  # a running chatgate reading the same bot's messages (Telegram: 409), the network
        token = getattr(section, token_key).get_secret_value()
        print(f"  could not read the bot's messages: {(str(exc) or type(exc).__name__).replace(token, '<token>')}")
        return None
    if found is None:
        print("  no message came")
        return None
    user_id, who = found
    return user_id if ask.confirm(f"  From {who}, id {user_id}. Make them the admin?", True) else None


def setup(args: argparse.Namespace) -> int:
    from gateway.config import default_home
    from gateway.ops.unit import service_account

    interactive = sys.stdin.isatty() and not args.yes
    account, invoker_home = service_account()  # under sudo: the person behind it, as `service install` takes it
    owner = account if invoker_home else None
    home = invoker_home if invoker_home and "CHATGATE_HOME" not in os.environ else default_home()
    path = Path(args.config).expanduser().absolute() if args.config else home / "config.yaml"
    try:
        return _setup(args, Asker(_given(args), interactive), home, path, owner)
    except Stop as exc:
        print(exc, file=sys.stderr)
        return exc.status
    except (KeyboardInterrupt, EOFError):
        print("\nchatgate setup stopped: nothing written", file=sys.stderr)
        return 130


def _given(args: argparse.Namespace) -> dict[str, str]:
    options = {"--llm-base-url": args.llm_base_url, "--llm-api-key": args.llm_api_key, "--model": args.model,
               "--platform": args.platform, "--token": args.token, "--admin": args.admin, "--api-url": args.api_url}
    for setup in setups().values():  # (each platform's own secrets: `--slack-app-token`…)
        options.update({secret.option: getattr(args, option_dest(secret.option)) for secret in setup.secrets})
    return {option: value for option, value in options.items() if value is not None}


def _setup(args: argparse.Namespace, ask: Asker, home: Path, path: Path, owner: str | None) -> int:
    exists = path.exists()
    if exists and not ask.interactive and not args.force:
        raise Stop(f"chatgate setup: {path} exists: --force replaces it (a copy is kept as {path.name}.bak)", 2)
    data = read_config(path)
    if ask.interactive:
        print(f"chatgate setup writes {path}. [Brackets] hold what Enter keeps; Ctrl-C stops, writing nothing.")
    llm = _llm(ask, data)
    platform = _platform(ask, data)
    admin = _admin(ask, data, platform)
    if ask.missing:
        raise Stop("chatgate setup: no terminal to ask on, and no answer for: " + ", ".join(ask.missing)
                   + " (give them as options; chatgate setup --help)", 2)
    for test in ask.later:
        test()
    new = merged(data, llm, platform, admin)
    if new == data and exists:
        print(f"{path} already says this: left as it is")
    else:
        if exists and ask.interactive and not args.force and not ask.confirm(
                f"Replace {path}? (the current one is kept as {path.name}.bak)", False):
            raise Stop(f"chatgate setup: {path} left as it was; nothing written")
        write_config(path, home, new, owner)
        print(f"wrote {path} (mode 0600: it holds the keys and tokens)")
    return _service(args, ask, path, platform["platform"])


def _service(args: argparse.Namespace, ask: Asker, path: Path, platform: str) -> int:
    config = path if args.config else None
    try:  # (the configuration is written: stopping here only declines)
        agreed = not args.no_service and (args.yes or ask.interactive and ask.confirm(
            "Install chatgate as a systemd service now (started at boot, restarted if it fails)?", False))
    except (KeyboardInterrupt, EOFError):
        print()
        agreed = False
    status = install_service(config, args.unit_dir) if agreed else 0
    if status:
        print("the service was not installed (see above); the configuration is written", file=sys.stderr)
    where = setups()[platform].then or f"write to the bot on {setups()[platform].title}"
    run = "chatgate status shows it" if agreed and not status else "chatgate run starts it (chatgate service install " \
        "runs it as a service)"
    print(f"next: {run}; then {where}. chatgate doctor checks everything again.")
    return status
