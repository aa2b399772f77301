"""Logging set-up: every line the handler writes is redacted as a whole, tracebacks included."""

from __future__ import annotations

import json
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


class JsonFormatter(RedactingFormatter):
    """One JSON object per line (journald, Docker and log shippers): time, level, logger, message,
    and the traceback when there is one; redacted like the text format."""

    def __init__(self, secrets: Iterable[str]) -> None:
        super().__init__("%(message)s", secrets)

    def format(self, record: logging.LogRecord) -> str:
        entry = {"time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S") + f".{int(record.msecs):03d}",
                 "level": record.levelname, "logger": record.name,
                 "message": redact(record.getMessage(), self._secrets)}
        if record.exc_info:
            entry["exception"] = redact(self.formatException(record.exc_info), self._secrets)
        return json.dumps(entry, ensure_ascii=False)


def setup_logging(level: str, secrets: Iterable[str], fmt: str = "text") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter(secrets) if fmt == "json"
                         else RedactingFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s", secrets))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    for noisy in ("httpx", "httpx2", "aiohttp.access"):  # (httpx2: a line per LLM request, with its URL)
        logging.getLogger(noisy).setLevel(logging.WARNING)
