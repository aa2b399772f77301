"""Logging set-up: every line the handler writes is redacted as a whole, tracebacks included.

Under systemd, when stderr is the journal's stream (`$JOURNAL_STREAM` names its device and inode),
each line starts with its syslog priority (`<3>` error, `<4>` warning, `<6>` info, `<7>` debug; see
sd-daemon(3)), so `journalctl -p warning` filters them, and carries no time of its own (the
journal keeps one). Lines logged while a turn runs carry where it is (`log_context`: platform,
chat, session, turn — the turn's inbox id): as fields of the JSON format, in brackets in the text.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from contextvars import ContextVar
from typing import Any, Iterable, Mapping, TextIO

from gateway.ops.redact import redact

CONTEXT_FIELDS = ("platform", "chat", "session", "turn")
_CONTEXT: ContextVar[Mapping[str, Any]] = ContextVar("chatgate_log_context", default={})
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s%(where)s: %(message)s"
JOURNAL_TEXT_FORMAT = "%(levelname)s %(name)s%(where)s: %(message)s"


def log_context(**fields: Any) -> None:
    """Add `fields` (of `CONTEXT_FIELDS`) to what the current task logs from now on, and the tasks it
    starts (a context variable: another task's lines are not touched)."""
    _CONTEXT.set({**_CONTEXT.get(), **fields})


class ContextFilter(logging.Filter):
    """Copies the current `log_context` onto each record (`record.context`), where it was logged."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "context"):
            record.context = _CONTEXT.get()
        return True


def syslog_priority(levelno: int) -> int:
    """A logging level as a syslog priority: CRITICAL 2, ERROR 3, WARNING 4, INFO 6, DEBUG 7."""
    for floor, priority in ((logging.CRITICAL, 2), (logging.ERROR, 3), (logging.WARNING, 4), (logging.INFO, 6)):
        if levelno >= floor:
            return priority
    return 7


def to_journal(stream: TextIO) -> bool:
    """Whether `stream` is the journal's (its device and inode are those `$JOURNAL_STREAM` names)."""
    named = os.environ.get("JOURNAL_STREAM", "")
    try:
        device, inode = (int(part) for part in named.split(":"))
        found = os.fstat(stream.fileno())
    except (ValueError, OSError, AttributeError):
        return False
    return (found.st_dev, found.st_ino) == (device, inode)


class RedactingFormatter(logging.Formatter):
    """Formats a record the usual way (message, exception, stack), then redacts the result, so a
    secret inside an exception's text or a traceback's frames never reaches the log. `journal`:
    every line of it starts with the record's syslog priority."""

    def __init__(self, fmt: str, secrets: Iterable[str], *, journal: bool = False) -> None:
        super().__init__(fmt)
        self._secrets = list(secrets)
        self._journal = journal

    def format(self, record: logging.LogRecord) -> str:
        context = getattr(record, "context", None) or {}
        record.where = f" [{' '.join(f'{k}={context[k]}' for k in CONTEXT_FIELDS if k in context)}]" \
            if context else ""
        return self._prefixed(record, redact(super().format(record), self._secrets))

    def _prefixed(self, record: logging.LogRecord, text: str) -> str:
        if not self._journal:
            return text
        prefix = f"<{syslog_priority(record.levelno)}>"
        return "\n".join(prefix + line for line in text.split("\n"))


class JsonFormatter(RedactingFormatter):
    """One JSON object per line (journald, Docker and log shippers): time, level, logger, message,
    where in a turn it was logged (`CONTEXT_FIELDS`), and the traceback when there is one; redacted
    like the text format."""

    def __init__(self, secrets: Iterable[str], *, journal: bool = False) -> None:
        super().__init__("%(message)s", secrets, journal=journal)

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {"time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S") + f".{int(record.msecs):03d}",
                                 "level": record.levelname, "logger": record.name,
                                 "message": redact(record.getMessage(), self._secrets)}
        context = getattr(record, "context", None) or {}
        entry.update({k: context[k] for k in CONTEXT_FIELDS if k in context})
        if record.exc_info:
            entry["exception"] = redact(self.formatException(record.exc_info), self._secrets)
        return self._prefixed(record, json.dumps(entry, ensure_ascii=False))


def setup_logging(level: str, secrets: Iterable[str], fmt: str = "text") -> None:
    handler = logging.StreamHandler(sys.stderr)
    journal = to_journal(sys.stderr)
    handler.setFormatter(JsonFormatter(secrets, journal=journal) if fmt == "json"
                         else RedactingFormatter(JOURNAL_TEXT_FORMAT if journal else TEXT_FORMAT, secrets,
                                                 journal=journal))
    handler.addFilter(ContextFilter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    for noisy in ("httpx", "httpx2", "aiohttp.access"):  # (httpx2: a line per LLM request, with its URL)
        logging.getLogger(noisy).setLevel(logging.WARNING)
