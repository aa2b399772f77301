"""Whether a platform takes its token: the one cheap authenticated call its package declares
(`PlatformSpec.probe`: Telegram getMe, Slack auth.test and apps.connections.open, Discord's current
user), made the way the platform's settings say (its API address, so a test double or a proxy is
asked instead), within a time limit; and whether the model endpoint answers (`check_llm`).
`chatgate doctor` and `chatgate setup` use them. A platform's SDK is imported only when its token is
tested; platforms without a token (the web chat) have no probe.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from pydantic import SecretStr

from platforms.base import PlatformRefused, shown_url
from platforms.registry import specs, token_probe

PROBE_SECONDS = 10.0  # per platform; the probes of several platforms run side by side


@dataclass(frozen=True, slots=True)
class Verdict:
    """A probe's answer: `ok` with who the bot is (`text`, and its user name when it has one), or
    what is wrong and how to fix it (`text`, one line)."""

    platform: str
    ok: bool
    text: str
    username: str | None = None


def _said(exc: BaseException, secrets: list[str]) -> str:
    """An error in a line, without the tokens (Telegram's are in every URL)."""
    text = str(exc) or type(exc).__name__
    if type(exc).__module__.split(".")[0] not in ("builtins", "gateway"):
        text = f"{type(exc).__name__}: {text}" if str(exc) else text
    for secret in filter(None, secrets):
        text = text.replace(secret, "<token>")
    return text[:200]


async def probe(platform: str, section: Any, timeout: float = PROBE_SECONDS) -> Verdict | None:
    """Ask `platform` whether it takes the token in `section` (its config model); None for a
    platform that has no token to test."""
    spec = specs().get(platform)
    check = token_probe(spec) if spec is not None else None
    if spec is None or check is None:
        return None
    url = getattr(section, spec.address)
    address = f"platforms.{platform}.{spec.address} ({shown_url(url)})"
    try:
        async with asyncio.timeout(timeout):
            who, username = await check(section, timeout)
    except PlatformRefused as exc:
        return Verdict(platform, False, str(exc))
    except TimeoutError:
        return Verdict(platform, False, f"no answer within {timeout:g}s — check {address} and the network")
    except Exception as exc:  # DNS, a refused connection, TLS, a 5xx: anything else is about the way there
        said = _said(exc, _secrets(section))
        return Verdict(platform, False, f"cannot reach {urlsplit(url).hostname or 'it'}: {said} — check {address} "
                                        "and the network")
    return Verdict(platform, True, who, username)


def _secrets(section: Any) -> list[str]:
    """Every secret of a platform's section (to keep out of error texts)."""
    return [value.get_secret_value() for value in vars(section).values() if isinstance(value, SecretStr)]


async def check_llm(base_url: str | None, api_key: str | None, model: str) -> list[tuple[str, str]]:
    """Whether the model endpoint answers a model listing with this key, and lists the model: report
    lines as (" ok "|"warn"|"FAIL", text). (A listing costs nothing; a chat completion would be billed.)"""
    from agent.llm import LLMClient, LLMSettings

    client = LLMClient(LLMSettings(model=model, base_url=base_url, api_key=api_key))
    try:
        problem = await client.probe()
        if problem is not None:
            return [("FAIL", f"llm endpoint: {problem}")]
        models = await client.models()
    finally:
        await client.aclose()
    lines = [(" ok ", "llm endpoint answers")]
    if models and model not in models:
        lines.append(("warn", f"llm: model {model!r} is not in the endpoint's list ({', '.join(models[:8])}…)"))
    return lines
