"""`chatgate doctor`: what is configured, and whether it works."""

from __future__ import annotations

import asyncio
import socket
from typing import Callable

from agent.endpoint import redacted
from agent.safety.sandbox import Sandbox
from gateway.config import Config
from gateway.ops.probes import PROBE_SECONDS, check_llm, probe
from gateway.ops.safety import safety_report
from platforms.registry import PlatformUnavailable


def _port_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


async def _trouble(config: Config, line: Callable[[str, str], None]) -> dict[str, int] | None:
    """What waits and what failed, from the database, which is upgraded only when no daemon runs on it
    (never under one); None when it cannot be read (said in a line)."""
    from gateway.ops.process import may_migrate
    from gateway.storage import SchemaError, StorageError, Store

    try:
        store = await Store.open(config.db_path, url=config.database_url, durability=config.gateway.durability,
                                 migrate=may_migrate(config.home, config.database_url))
    except (SchemaError, StorageError) as exc:
        line("FAIL", f"state: {exc}")
        return None
    try:
        return await store.inbox.trouble_counts()
    finally:
        await store.close()


async def _platforms(config: Config, line: Callable[[str, str], None], timeout: float) -> bool:
    """A line per enabled platform, with whether it takes its token (all asked at once); False when one
    does not, or none is enabled."""
    try:
        adapters = config.adapters()
    except PlatformUnavailable as exc:
        line("FAIL", str(exc))
        return False
    if not adapters:
        line("FAIL", "platforms: none enabled")
        return False
    sections = config.platforms.sections()
    verdicts = await asyncio.gather(*(probe(a.name, sections[a.name], timeout) for a in adapters))
    for adapter, verdict in zip(adapters, verdicts):
        if verdict is None:
            line("info", f"platform: {adapter.name}")
        else:
            line(" ok " if verdict.ok else "FAIL", f"{adapter.name}: {verdict.text}")
    if any(a.capabilities.local for a in adapters):
        where = f"http://{config.http.host}:{config.http.port}/"
        if _port_free(config.http.host, config.http.port):
            line(" ok ", f"web chat will listen on {where}")
        else:
            line("warn", f"{config.http.host}:{config.http.port} is in use (a running chatgate, or another program)")
    return all(verdict is None or verdict.ok for verdict in verdicts)


async def run_doctor(config: Config, out: list[str], timeout: float = PROBE_SECONDS) -> bool:
    """Append report lines to `out`; return True when nothing is wrong. `timeout`: each platform's token
    check's (`gateway.ops.probes`)."""
    ok = True

    def line(status: str, text: str) -> None:
        out.append(f"[{status:>4}] {text}")

    from gateway.storage.postgres_engine import where

    line("info", f"home: {config.home} (database {where(config.database_url) if config.database_url else config.db_path})")
    llm = config.llm
    if not llm.configured:
        line("FAIL", "llm: not configured — set llm.base_url (and llm.api_key) or OPENAI_BASE_URL / OPENAI_API_KEY")
        ok = False
    else:
        line("info", f"llm: {redacted(llm.base_url or 'https://api.openai.com/v1')}, model {llm.model}, "
                     f"api key {'set' if llm.api_key else 'not set'}")
        for status, text in await check_llm(llm.base_url, llm.api_key.get_secret_value() if llm.api_key else None,
                                            llm.model):
            line(status, text)
            ok = ok and status != "FAIL"
    counts = await _trouble(config, line) if config.database_url or config.db_path.exists() else {}
    ok = ok and counts is not None
    if counts:
        line("info", "state: {pending_replies} repl(y/ies) waiting to be sent".format(**counts))
        if counts["dead_letters"]:
            line("warn", f"{counts['dead_letters']} input(s) could not be taken and were set aside: "
                         "chatgate inbox dead")
        if counts["failed_turns"] or counts["failed_deliveries"]:
            line("warn", f"{counts['failed_turns']} failed turn(s), {counts['failed_deliveries']} undeliverable "
                         "repl(y/ies): chatgate inbox failed")
    box = Sandbox(config.agent.sandbox.mode, network=config.agent.sandbox.network == "on")
    await box.ready()
    for status, text in safety_report(config, box):
        line(status, text)
        ok = ok and status != "FAIL"
    return await _platforms(config, line, timeout) and ok
