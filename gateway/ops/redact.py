"""Removing secrets from text a person or a log will see."""

from __future__ import annotations

import re
from typing import Iterable

MASK = "***"

# Shapes of secrets that need no configuration to be recognised.
_PATTERNS = [
    re.compile(r"(?i)\b(sk|pk|rk)-[A-Za-z0-9_-]{16,}"),                      # OpenAI-style keys
    re.compile(r"\b(ghp|gho|ghu|ghs|ghr|github_pat)_[A-Za-z0-9_]{20,}"),       # GitHub tokens
    re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}"),                            # Slack tokens
    re.compile(r"\bAKIA[0-9A-Z]{16}\b"),                                       # AWS access key ids
    re.compile(r"\b\d{6,12}:[A-Za-z0-9_-]{30,}\b"),                            # Telegram bot tokens
    re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?-----END [A-Z ]*PRIVATE KEY-----", re.S),
]
# name=value, name: value, --name value, for names that say "secret"
_NAMED = re.compile(
    r"(?i)(\b[\w.-]*(?:password|passwd|pwd|secret|token|api[_-]?key|apikey|access[_-]?key|auth)[\w.-]*"
    r"(?:\s*[=:]\s*|\s+(?=['\"]?\S{6,})))('[^']+'|\"[^\"]+\"|[^\s'\"]{4,})")
_BEARER = re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]{8,}")
_URL_CREDENTIALS = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://[^/\s:@]+):([^/\s@]+)@")


def redact_values(text: str, secrets: Iterable[str] = ()) -> str:
    """`text` with only real secrets replaced: the configured values and unmistakable key shapes.
    For what a person must judge (an approval prompt): the name-based guesses of `redact` would
    also hide ordinary words and paths (`cp api_key.txt /tmp/x` would lose its destination)."""
    for secret in sorted({s for s in secrets if len(s) >= 4}, key=len, reverse=True):
        text = text.replace(secret, MASK)
    for pattern in _PATTERNS:
        text = pattern.sub(MASK, text)
    text = _BEARER.sub(lambda m: f"{m.group(1)} {MASK}", text)
    return _URL_CREDENTIALS.sub(lambda m: f"{m.group(1)}:{MASK}@", text)


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """`text` with known secret values and secret-looking values replaced by ``***``."""
    return _NAMED.sub(lambda m: m.group(1) + MASK, redact_values(text, secrets))
