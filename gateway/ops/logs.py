"""Logging set-up: every line the handler writes is redacted as a whole, tracebacks included."""

from __future__ import annotations

import logging
import sys
from typing import Iterable

from gateway.ops.redact import redact


class RedactingFormatter(logging.Formatter):
    """Formats a record the usual way (message, exception, stack), then redacts the result, so a
    secret inside an exception's text or a traceback's frames never reaches the log."""

    def __init__(self, fmt: str, secrets: Iterable[str]) -> None:
        super().__init__(fmt)
        self._secrets = list(secrets)

    def format(self, record: logging.LogRecord) -> str:
        return redact(super().format(record), self._secrets)


def setup_logging(level: str, secrets: Iterable[str]) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(RedactingFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s", secrets))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    for noisy in ("httpx", "httpx2", "openai", "aiohttp.access"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
