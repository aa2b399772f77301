"""A streaming chat-completions client for any OpenAI-compatible endpoint.

The `openai` package is imported on first use (it takes about a second), so the gateway is
ready before it. The client retries 429/5xx/connection errors of a request itself (honouring
`retry-after`); this module adds retries for streams that break after they started, and turns
what is left into an `LLMError` whose `user_message` is honest and short.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable

log = logging.getLogger(__name__)

TextSink = Callable[[str], Awaitable[None] | None]
Callback = Callable[[], Awaitable[None] | None]


@dataclass(frozen=True, slots=True)
class LLMSettings:
    model: str
    base_url: str | None = None
    api_key: str | None = None
    timeout: float = 120.0
    max_retries: int = 3
    temperature: float | None = None


@dataclass(slots=True)
class ToolCall:
    id: str
    name: str
    arguments: str


@dataclass(slots=True)
class Completion:
    content: str
    tool_calls: list[ToolCall] = field(default_factory=list)
    finish_reason: str | None = None
    usage: dict[str, int] | None = None  # the endpoint's token counts, when it reports them


class LLMError(Exception):
    """The model could not answer; `user_message` is what the person in the chat is told."""

    def __init__(self, message: str, user_message: str) -> None:
        super().__init__(message)
        self.user_message = user_message


async def _call(fn: Callable[..., Any] | None, *args: Any) -> None:
    if fn is not None:
        result = fn(*args)
        if inspect.isawaitable(result):
            await result


def _refuses_usage(exc: BaseException) -> bool:
    """An endpoint rejecting the request because of stream_options (a 400/422 naming it)."""
    return getattr(exc, "status_code", None) in (400, 422) and "stream_options" in str(exc)


class _StreamBroke(Exception):
    """The response had started when the connection failed: worth another try."""


class LLMClient:
    """Streams chat completions through `openai.AsyncOpenAI`, tuned for many concurrent turns.

    Measured on the gateway benchmark (1,000 concurrent turns), three choices cut the client's
    CPU per turn by more than half: the aiohttp transport (httpcore2's pool rescans every
    connection per request, quadratic in concurrent streams), passing messages through
    `extra_body` (the SDK's type-directed transform of a long history costs tens of ms), and
    reading the SSE lines ourselves instead of building a model object per chunk. The SDK still
    does auth, retries with backoff (honouring `retry-after`) and status errors.
    """

    def __init__(self, settings: LLMSettings) -> None:
        self.settings = settings
        self._client: Any = None
        self.observer: Callable[[float, dict[str, int] | None], None] | None = None  # (seconds, usage) per request
        self.ask_usage = True  # stream_options.include_usage, until an endpoint refuses it

    def _openai(self) -> Any:
        if self._client is None:
            import openai

            self._client = openai.AsyncOpenAI(
                base_url=self.settings.base_url, api_key=self.settings.api_key or "not-needed",
                max_retries=self.settings.max_retries, timeout=self.settings.timeout,
                http_client=openai.DefaultAioHttpClient(timeout=self.settings.timeout))
        return self._client

    @staticmethod
    def warm_up() -> None:
        """Import `openai` and its aiohttp transport (about a second); safe in a worker thread.
        The client itself is built on the event loop, at first use."""
        import openai  # noqa: F401
        import openai._vendor.httpx_aiohttp  # noqa: F401

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.close()
            self._client = None

    async def probe(self) -> str | None:
        """None when the endpoint answers a model listing, else a short reason."""
        try:
            client = self._openai().with_options(max_retries=0, timeout=5.0)
            await client.models.list()
        except Exception as exc:  # any failure is the answer
            return self._explain(exc)
        return None

    async def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None, *,
                       on_text: TextSink | None = None, on_restart: Callback | None = None) -> Completion:
        """One streamed completion; text deltas go to `on_text` as they arrive."""
        attempt = 0
        while True:
            emitted: list[bool] = [False]
            started = time.monotonic()
            try:
                completion = await self._stream(messages, tools, on_text, emitted)
            except _StreamBroke as exc:
                attempt += 1
                if attempt > self.settings.max_retries:
                    raise LLMError(str(exc.__cause__), self._explain(exc.__cause__)) from exc.__cause__
                log.warning("LLM stream broke (%s); retry %d", exc.__cause__, attempt)
                if emitted[0]:
                    await _call(on_restart)
                await asyncio.sleep(min(0.5 * 2 ** (attempt - 1), 8.0))
                continue
            except (asyncio.CancelledError, LLMError):
                raise
            except Exception as exc:
                if self.ask_usage and _refuses_usage(exc):  # asked again at once, without it, from now on
                    log.info("the LLM endpoint refuses stream_options; asking without it from now on")
                    self.ask_usage = False
                    continue
                raise LLMError(str(exc), self._explain(exc)) from exc
            if self.observer is not None:
                self.observer(time.monotonic() - started, completion.usage)
            return completion

    async def _stream(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
                      on_text: TextSink | None, emitted: list[bool]) -> Completion:
        body: dict[str, Any] = {"messages": messages}
        if self.ask_usage:  # token counts at the end of the stream (for /metrics); older servers refuse it
            body["stream_options"] = {"include_usage": True}
        if tools:
            body["tools"] = tools
        if self.settings.temperature is not None:
            body["temperature"] = self.settings.temperature
        content: list[str] = []
        calls: dict[int, ToolCall] = {}
        finish: str | None = None
        usage: dict[str, int] | None = None
        completions = self._openai().chat.completions.with_streaming_response
        async with completions.create(model=self.settings.model, messages=[], stream=True, extra_body=body) as response:
            try:
                async for line in response.iter_lines():
                    if not line.startswith("data:"):
                        continue
                    data = line[5:].strip()
                    if data == "[DONE]":
                        break
                    chunk = json.loads(data)
                    usage = chunk.get("usage") or usage
                    if "error" in chunk:
                        raise LLMError(f"error in stream: {chunk['error']}",
                                       "The language model reported an error while answering. Please try again.")
                    for choice in chunk.get("choices") or ():
                        finish = choice.get("finish_reason") or finish
                        delta = choice.get("delta") or {}
                        if delta.get("content"):
                            content.append(delta["content"])
                            emitted[0] = True
                            await _call(on_text, delta["content"])
                        for tc in delta.get("tool_calls") or ():
                            slot = calls.setdefault(tc.get("index", len(calls)), ToolCall(id="", name="", arguments=""))
                            slot.id = tc.get("id") or slot.id
                            function = tc.get("function") or {}
                            if function.get("name"):  # some servers repeat the name in every delta: set it
                                slot.name = function["name"]
                            slot.arguments += function.get("arguments") or ""
            except (asyncio.CancelledError, LLMError):
                raise
            except Exception as exc:
                raise _StreamBroke(str(exc)) from exc
        tool_calls = [calls[i] for i in sorted(calls)]
        for i, call in enumerate(tool_calls):
            call.id = call.id or f"call_{i}"
        return Completion(content="".join(content), tool_calls=tool_calls, finish_reason=finish, usage=usage)

    def _explain(self, exc: BaseException | None) -> str:
        """A short, honest sentence for the person in the chat."""
        import openai

        where = self.settings.base_url or "api.openai.com"
        if isinstance(exc, openai.APIStatusError):
            code = exc.status_code
            if code in (401, 403):
                return f"The language model refused the API key (HTTP {code}). Check llm.api_key."
            if code == 404:
                return f"The language model endpoint has no model {self.settings.model!r} (HTTP 404). Check llm.model."
            if code == 429:
                return "The language model is rate-limiting requests (HTTP 429) and did not recover. Please try again in a minute."
            if code >= 500:
                return f"The language model service failed (HTTP {code}) and did not recover after retries. Please try again shortly."
            return f"The language model rejected the request (HTTP {code}): {exc.message}"[:400]
        if isinstance(exc, openai.APITimeoutError):
            return f"The language model did not answer within {self.settings.timeout:.0f} s. Please try again."
        if isinstance(exc, openai.APIConnectionError):
            return f"I could not reach the language model at {where}. Is it running?"
        return "The connection to the language model broke repeatedly while answering. Please try again."
