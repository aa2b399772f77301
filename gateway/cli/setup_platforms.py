"""What `chatgate setup` does with each platform's declaration (`platforms/<name>/setup.py`, read
through `platforms.setup.setups()`): the platform a config file sets up, the keys the platform's
usual variables fill, the section as it will be written, and whether an answer looks like a user id
there. Its tokens are tested by `gateway.ops.probes`; nothing here names a platform."""

from __future__ import annotations

import os
import re
import secrets
from typing import Any, Mapping

from gateway.cli.setup_files import Stop
from platforms.setup import PlatformSetup, setups


def id_problem(setup: PlatformSetup, user_id: str) -> str | None:
    """Why `user_id` cannot be a user id on the platform, or None."""
    assert setup.user_ids is not None
    if re.fullmatch(setup.user_ids.pattern, user_id):
        return None
    return f"{user_id!r} does not look like a {setup.title} user id (e.g. {setup.user_ids.example})"


def section_of(data: dict[str, Any], platform: str) -> dict[str, Any]:
    """The `platforms.<platform>` mapping of a config file's data (empty when unset)."""
    section = (data.get("platforms") or {}).get(platform)
    return section if isinstance(section, dict) else {}


def configured_platform(data: dict[str, Any]) -> str | None:
    """The platform a config file's data sets up: the first with a token, else the first without one
    whose keys setup writes are there (the web chat switched on)."""
    known = setups().values()
    for setup in known:
        if setup.token is not None and section_of(data, setup.name).get(setup.token.key):
            return setup.name
    for setup in known:
        if setup.token is None and setup.fixed and _holds(section_of(data, setup.name), setup.fixed):
            return setup.name
    return None


def _holds(section: dict[str, Any], values: Mapping[str, Any]) -> bool:
    """Whether `section` has these values, of these types (`enabled: true`, not `enabled: 1`)."""
    return all(type(section.get(key)) is type(value) and section.get(key) == value for key, value in values.items())


def platform_env(name: str) -> dict[str, str]:
    """The section's keys the platform's usual variables set now (TELEGRAM_BOT_TOKEN → token…)."""
    from platforms.registry import specs

    return {key: os.environ[var] for var, key in specs()[name].env.items() if os.environ.get(var)}


def api_address_key(name: str) -> str:
    """The section's key for the platform's API address (a self-hosted server, a proxy, a test double)."""
    from platforms.registry import specs

    return specs()[name].address


def section_model(values: dict[str, Any], data: dict[str, Any]) -> Any:
    """The platform's config model of the section as it will be written (raises Stop when it is not valid)."""
    from pydantic import ValidationError

    from platforms.registry import specs

    name = values["platform"]
    section = {**section_of(data, name), **{k: v for k, v in values.items() if k not in ("platform", "username")}}
    try:
        return specs()[name].config.model_validate(section)
    except ValidationError as exc:
        error = exc.errors()[0]
        raise Stop(f"chatgate setup: platforms.{name}.{'.'.join(map(str, error['loc']))}: {error['msg']}", 2) from None


def start_code() -> str:
    """A code for the person to send the bot, so that the message read is theirs, not a stranger's."""
    return secrets.token_hex(4)
