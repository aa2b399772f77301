"""Whom an LLM request serves: the loop that made it (main, review, curator, cron, …) and the
conversation and person, carried in a context variable so that the LLM client can report it
without every caller passing it along. Each loop's task sets it when it starts."""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Iterator


@dataclass(frozen=True, slots=True)
class UsageScope:
    loop: str  # main | review | curator | cron | …
    session_id: int | None = None
    platform: str = ""
    user_id: str = ""


CURRENT: ContextVar[UsageScope] = ContextVar("chatgate_usage_scope", default=UsageScope("other"))


def serving(loop: str, session_id: int | None = None, platform: str = "", user_id: str = "") -> None:
    """From here on in this task, LLM requests count for `loop` (and this conversation and person)."""
    CURRENT.set(UsageScope(loop, session_id, platform, user_id))


@contextmanager
def counted_as(loop: str) -> Iterator[None]:
    """Within the block, LLM requests count for `loop`, for the same conversation and person."""
    scope = CURRENT.get()
    token = CURRENT.set(UsageScope(loop, scope.session_id, scope.platform, scope.user_id))
    try:
        yield
    finally:
        CURRENT.reset(token)
