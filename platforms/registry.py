"""Which platforms exist: each package under `platforms/` declares a `SPEC` in its `spec` module.

A spec names the platform, its config model (the `platforms.<name>` section), the environment
variables that fill it, and a factory that imports the SDK only when the platform is used.
What `chatgate setup` asks of a platform is declared beside it, in its `setup` module (see
`platforms/setup.py`: the command line's parser reads it, so it is kept free of the config model).
Adding a platform is adding a package; nothing else lists platforms by name.
"""

from __future__ import annotations

import functools
import importlib
import pkgutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Awaitable, Callable, Mapping

import platforms
from platforms.base import PlatformAdapter
from platforms.config import PlatformConfig


@dataclass(frozen=True, slots=True)
class AdapterEnv:
    """What a factory may use besides its own section."""

    home: Path  # CHATGATE_HOME; an adapter keeps files under home/files/<platform>
    http_host: str = "127.0.0.1"  # where the gateway's HTTP server listens
    public_url: str | None = None  # the address it is reached at from outside (a reverse proxy), if any
    max_message_chars: int = 32_000  # the gateway takes no longer message (an adapter may say so first)


@dataclass(frozen=True, slots=True)
class PlatformSpec:
    name: str
    config: type[PlatformConfig]
    create: Callable[[Any, AdapterEnv], PlatformAdapter]  # (its config section, env) → adapter
    env: Mapping[str, str] = field(default_factory=dict)  # environment variable → key of the section
    install: str | None = None  # the pip requirement that brings the SDK, e.g. "chatgate[telegram]"
    sdk: tuple[str, ...] = ()  # top-level modules of the SDK, to recognise a missing install
    # "module:function": async (section, timeout) → (who the bot is, its user name), one cheap call that
    # says whether the platform takes the token (`PlatformRefused` when not); None: no token to test
    probe: str | None = None
    address: str = "base_url"  # the section's key holding the API address the probe asks


class PlatformUnavailable(Exception):
    """A configured platform cannot be built; the message is one line saying what to do."""


@functools.cache
def specs() -> dict[str, PlatformSpec]:
    """Every platform package's spec, by name."""
    found: dict[str, PlatformSpec] = {}
    for module in pkgutil.iter_modules(platforms.__path__):
        if not module.ispkg:
            continue
        spec = getattr(importlib.import_module(f"platforms.{module.name}.spec"), "SPEC", None)
        if isinstance(spec, PlatformSpec):
            found[spec.name] = spec
    return dict(sorted(found.items()))


def token_probe(spec: PlatformSpec) -> Callable[[Any, float], Awaitable[tuple[str, str | None]]] | None:
    """The platform's token check (`PlatformSpec.probe`), its module imported now; None without one."""
    if spec.probe is None:
        return None
    module, _, name = spec.probe.partition(":")
    return getattr(importlib.import_module(module), name)  # type: ignore[no-any-return]


def create(spec: PlatformSpec, section: PlatformConfig, env: AdapterEnv) -> PlatformAdapter:
    try:
        return spec.create(section, env)
    except ModuleNotFoundError as exc:
        missing = (exc.name or "").split(".")[0]
        if missing not in spec.sdk:
            raise
        raise PlatformUnavailable(
            f"platforms.{spec.name} is configured but its library ({missing}) is not installed: "
            f"pip install '{spec.install}' (or `make run`, which installs every platform)") from None


def wanted(sections: Mapping[str, PlatformConfig]) -> list[str]:
    """The platforms the configuration asks for, in a stable order."""
    known = specs()
    configured = {name for name, section in sections.items() if section.configured}
    return [name for name, section in sections.items() if name in known and section.wanted(bool(configured - {name}))]


def build(sections: Mapping[str, PlatformConfig], env: AdapterEnv) -> list[PlatformAdapter]:
    """The adapters the configuration asks for, in a stable order."""
    known = specs()
    return [create(known[name], sections[name], env) for name in wanted(sections)]
