"""Context compression: a conversation that grows past its share of the model's context window is
made to fit before the request, instead of failing on context length.

Two passes, cheapest first, when the request's estimated size exceeds `threshold` × the window:
1. old tool results — outside the protected tail — become a one-line placeholder (no LLM call);
2. if that is not enough, the middle of the conversation is summarised by the auxiliary model in
   one request without tools. Kept word for word: the system prompt, the first user message and
   the last `protect_last_n` messages; the boundary moves so a tool call is never separated from
   its results; an earlier summary is part of what is summarised (updated, not stacked).

Sizes are estimated from the characters, scaled by what the endpoint reported for the last
request (`observe`). The full transcript stays in the store; `on_summary` lets the gateway keep
the summary as the session's new starting point.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Awaitable, Callable

from agent import usage as usage_scope

if TYPE_CHECKING:  # (a type only: the storage reads SUMMARY_PREFIX, and `chatgate status` must not load aiohttp)
    from agent.llm import LLMClient

Message = dict[str, Any]
SUMMARY_PREFIX = "[Summary of the earlier conversation]\n"
CLEARED = "[earlier tool output cleared to save context: {n:,} characters]"
SUMMARY_IDENTITY = (
    "You compress conversations between a user and an AI assistant so that the assistant can continue "
    "them. Write a faithful summary of the conversation you are given: facts learned, decisions made, "
    "what the user wants and prefers, files, commands and results that matter, and what is still open. "
    "Do not add anything that is not in it. Plain text, no preamble.")


def _chars(message: Message) -> int:
    size = len(str(message.get("content") or ""))
    for call in message.get("tool_calls") or ():
        size += len(json.dumps(call))
    return size + 16  # the role and the framing of each message


def size(messages: list[Message]) -> int:
    """The messages' size in characters (what the token estimate scales)."""
    return sum(_chars(m) for m in messages)


DEFAULT_WINDOW = 128_000


@dataclass(slots=True)
class Compressor:
    summarizer: LLMClient
    context_window: int | None  # None: asked of `window_source` at the first request, else DEFAULT_WINDOW
    threshold: float = 0.5
    protect_last_n: int = 20
    tokens_per_char: float = 0.25  # refined by `observe` from the endpoint's own counts
    window_source: Callable[[], Awaitable[int | None]] | None = None  # the main endpoint's word on it

    @property
    def limit(self) -> int:
        return int((self.context_window or DEFAULT_WINDOW) * self.threshold)

    async def _learn_window(self) -> None:
        if self.context_window is None:
            told = await self.window_source() if self.window_source is not None else None
            self.context_window = told or DEFAULT_WINDOW

    def _fits(self, chars: int) -> bool:
        return chars * self.tokens_per_char <= self.limit

    def observe(self, chars: int, usage: dict[str, int] | None) -> None:
        """Learn the ratio of tokens to characters from what the endpoint counted for a request
        of `chars` characters."""
        prompt = (usage or {}).get("prompt_tokens")
        if prompt and chars > 2000:  # (tools' schemas dominate small requests)
            self.tokens_per_char = min(1.0, max(0.1, prompt / chars))

    async def fit(self, messages: list[Message], *, force: bool = False,
                  on_summary: Callable[[str, int], Awaitable[None]] | None = None) -> tuple[list[Message], int]:
        """`messages` (system first), made to fit under the limit, and their size in characters;
        `force`: compress even if they seem to fit (the endpoint said they do not).
        `on_summary(summary, covered)` hears of a new summary and how many messages after the
        first user message it replaces."""
        await self._learn_window()
        chars = size(messages)
        if not force and self._fits(chars):
            return messages, chars
        cleared = self._clear_tool_results(messages)
        chars = size(cleared)
        if not force and self._fits(chars):
            return cleared, chars
        first_user = next((i for i, m in enumerate(cleared) if m["role"] == "user"), None)
        if first_user is None:
            return cleared, chars
        start = first_user + 1
        end = self._tail_start(cleared, start)
        if end <= start:  # nothing between the head and the protected tail
            return cleared, chars
        summary = await self._summarise(cleared[start:end])
        if on_summary is not None:
            await on_summary(summary, end - start)
        fitted = [*cleared[:start], {"role": "user", "content": SUMMARY_PREFIX + summary}, *cleared[end:]]
        return fitted, size(fitted)

    def _clear_tool_results(self, messages: list[Message]) -> list[Message]:
        protected = max(0, len(messages) - self.protect_last_n)
        out = []
        for i, m in enumerate(messages):
            content = str(m.get("content") or "")
            if i < protected and m["role"] == "tool" and len(content) > 200 and not content.startswith("[earlier"):
                m = {**m, "content": CLEARED.format(n=len(content))}
            out.append(m)
        return out

    def _tail_start(self, messages: list[Message], start: int) -> int:
        """Where the protected tail begins: never on a tool result (its call comes with it)."""
        end = max(start, len(messages) - self.protect_last_n)
        while end > start and messages[end]["role"] == "tool":
            end -= 1
        return end

    async def _summarise(self, middle: list[Message]) -> str:
        lines = []
        for m in middle:
            text = str(m.get("content") or "")
            if m["role"] == "tool":
                text = text if len(text) <= 2000 else text[:2000] + " …"
                lines.append(f"[result of {m.get('name') or 'a tool'}] {text}")
                continue
            calls = ", ".join(f"{c['function']['name']}({c['function']['arguments'][:300]})"
                              for c in m.get("tool_calls") or ())
            lines.append(f"{m['role']}: {text}" + (f" [called {calls}]" if calls else ""))
        words = max(200, self.limit // 8)
        request = [{"role": "system", "content": SUMMARY_IDENTITY},
                   {"role": "user", "content": f"Summarise in at most {words} words:\n\n" + "\n".join(lines)}]
        with usage_scope.counted_as("compression"):
            completion = await self.summarizer.complete(request)
        return completion.content.strip() or "(nothing to keep)"


def is_context_overflow(exc: BaseException) -> bool:
    """An endpoint's refusal of a request that does not fit its context window."""
    text = str(exc).lower()
    return getattr(exc, "status_code", None) in (400, 413, 422) and any(
        s in text for s in ("context length", "context_length", "context window", "too many tokens",
                            "maximum context", "prompt is too long", "reduce the length"))
