"""Secrets kept out of what the model sees: a redactor for tool results and a clean environment
for the commands the agent runs."""

from __future__ import annotations

import os
import re
from typing import Sequence

MIN_SECRET_LEN = 8  # shorter values are dummies ("x", "ollama") whose redaction would blank ordinary words

_SECRET_NAME = re.compile(r"TOKEN|SECRET|PASSWORD|PASSWD|API_KEY|APIKEY|PRIVATE_KEY|CREDENTIAL", re.IGNORECASE)
_SECRET_PREFIXES = ("CHATGATE_", "OPENAI_", "TELEGRAM_", "DISCORD_", "SLACK_", "ANTHROPIC_", "OPENROUTER_")

class Redactor:
    def __init__(self, secrets: Sequence[str]) -> None:
        # longest first, so a secret that contains another is replaced whole
        self.secrets = tuple(sorted({s for s in secrets if s and len(s) >= MIN_SECRET_LEN}, key=len, reverse=True))

    def __call__(self, text: str) -> str:
        for secret in self.secrets:
            if secret in text:
                text = text.replace(secret, "***")
        return text

    def partial_suffix(self, text: str) -> int:
        """Length of the longest end of `text` that could be the start of a secret cut off there."""
        best = 0
        for s in self.secrets:
            for k in range(min(len(s) - 1, len(text)), best, -1):
                if text.endswith(s[:k]):
                    best = k
                    break
        return best

    def partial_prefix(self, text: str) -> int:
        """Length of the longest start of `text` that could be the end of a secret cut off there."""
        best = 0
        for s in self.secrets:
            for k in range(min(len(s) - 1, len(text)), best, -1):
                if text.startswith(s[-k:]):
                    best = k
                    break
        return best


def command_env(secrets: Sequence[str] = ()) -> dict[str, str]:
    """A copy of os.environ without chatgate's credentials, for commands the agent runs."""
    values = Redactor(secrets).secrets
    return {name: value for name, value in os.environ.items()
            if not _SECRET_NAME.search(name)
            and not name.upper().startswith(_SECRET_PREFIXES)
            and not any(s in value for s in values)}

