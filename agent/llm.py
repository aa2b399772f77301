"""A streaming chat-completions client for any OpenAI-compatible endpoint, on aiohttp.

One request is one POST of `/chat/completions` with `stream: true`, read as server-sent events.
Before the answer starts, 408/409/429/5xx and connection failures are retried with backoff
(`max_retries`); a stream that breaks after it started is retried too (the sink is told to start
over). How long to pause is `retry_pause`: the endpoint's `retry-after` is honoured up to a bound,
and a pause that is longer, or would outlast the caller's deadline, is not taken — the error is
raised at once. What is left becomes an `LLMError` whose `user_message` is honest and short and
names no address (`llm.base_url` may hold credentials: see `agent.endpoint`); its message, for
the log, shows the address redacted.

Why not the `openai` package: measured on the shared benchmark, importing it took 0.8 s and
48 MB of the gateway's 80 MB idle RSS, and building each request through it was half of the
main thread's CPU per turn (1,000 concurrent turns) — while all it did for us was the POST,
the auth header and the retries: the messages already went through `extra_body` untyped and
the SSE lines were read here.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import math
import random
import time
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime
from typing import Any, AsyncIterator, Awaitable, Callable

import aiohttp

from agent.endpoint import for_logs, for_people, redacted
from agent.tools import Schemas

log = logging.getLogger(__name__)

TextSink = Callable[[str], Awaitable[None] | None]
Callback = Callable[[], Awaitable[None] | None]
Deadline = Callable[[], float]  # when the caller stops waiting, on the event loop's clock


@dataclass(frozen=True, slots=True)
class LLMSettings:
    model: str
    base_url: str | None = None
    api_key: str | None = None
    timeout: float = 120.0
    max_retries: int = 3
    temperature: float | None = None
    turn_timeout: float | None = None  # seconds one wait on the model may take (see `agent.loop`); None: unbounded


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


def _remaining(deadline: Deadline | None) -> float | None:
    return None if deadline is None else deadline() - asyncio.get_running_loop().time()


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


class EndpointError(Exception):
    """The endpoint answered with an error status (after the retries for it)."""

    def __init__(self, status_code: int, message: str, asked: float | None = None) -> None:
        super().__init__(f"HTTP {status_code}: {message}")
        self.status_code = status_code
        self.message = message
        self.asked = asked  # the endpoint's retry-after, in seconds, when it said one
        self.not_waited = False  # given up at once: that pause was longer than we wait


RETRIED_STATUSES = frozenset({408, 409, 429}) | frozenset(range(500, 600))
MAX_RETRY_AFTER = 60.0  # a longer retry-after is not waited out: the person is told instead


def retry_pause(attempt: int, asked: float | None, remaining: float | None) -> float | None:
    """Seconds to wait before retry number `attempt` (1, 2, …), or None: do not retry, say so now.

    `asked` is the endpoint's retry-after: honoured when it is at most `MAX_RETRY_AFTER` (never
    retried earlier than asked), else not waited out. Without one, an exponential backoff (0.5 s
    doubling to 8 s, jittered). A pause that would end after the deadline (`remaining` seconds from
    now; None: no deadline) is not taken either: the caller would only time out while waiting."""
    if asked is not None and asked >= 0:
        if asked > MAX_RETRY_AFTER:
            return None
        pause = asked
    else:
        pause = min(0.5 * 2 ** (attempt - 1), 8.0) * (1 - 0.25 * random.random())
    return None if remaining is not None and pause >= remaining else pause


def _retry_after(headers: Any) -> float | None:
    """Seconds the endpoint asks us to wait (`retry-after-ms`, or `retry-after` in seconds or as an
    HTTP date)."""
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        try:
            return float(headers[name]) * scale
        except (KeyError, TypeError, ValueError):
            continue
    try:
        return max(0.0, parsedate_to_datetime(headers["retry-after"]).timestamp() - time.time())
    except (KeyError, TypeError, ValueError, IndexError):
        return None


def _duration(seconds: float) -> str:
    """"45 s", "2 minutes", "3 hours": how long, for a person."""
    if seconds < 90:
        return f"{math.ceil(seconds)} s"
    if seconds < 90 * 60:
        return f"{math.ceil(seconds / 60)} minutes"
    return f"{math.ceil(seconds / 3600)} hours"


JSON_BODY = {"Content-Type": "application/json"}


def _encode(body: dict[str, Any], tools: list[dict[str, Any]] | None) -> bytes:
    """The request body as JSON. A scope's schemas (`agent.tools.Schemas`, most of a short
    conversation's request) bring their JSON made once."""
    text = json.dumps(body)
    if tools:
        encoded = tools.json if isinstance(tools, Schemas) else json.dumps(tools)
        text = f'{text[:-1]}, "tools": {encoded}}}'
    return text.encode()


def _error_text(body: bytes) -> str:
    try:
        error = json.loads(body).get("error")
        return str(error.get("message") if isinstance(error, dict) else error)[:500]
    except (ValueError, AttributeError):
        return body.decode("utf-8", "replace").strip()[:500] or "no details"


class LLMClient:
    """Streams chat completions over one pooled aiohttp session, tuned for many concurrent turns."""

    def __init__(self, settings: LLMSettings) -> None:
        self.settings = settings
        self.base_url = (settings.base_url or "https://api.openai.com/v1").rstrip("/")
        self._http: aiohttp.ClientSession | None = None
        self.observer: Callable[[float, dict[str, int] | None, str], None] | None = None  # (s, usage, model)
        self.ask_usage = True  # stream_options.include_usage, until an endpoint refuses it

    def _session(self) -> aiohttp.ClientSession:
        if self._http is None or self._http.closed:
            self._http = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=0, ttl_dns_cache=300),
                headers={"Authorization": f"Bearer {self.settings.api_key or 'not-needed'}",
                         "User-Agent": "chatgate"})
        return self._http

    async def aclose(self) -> None:
        if self._http is not None:
            await self._http.close()
            self._http = None

    async def _send(self, method: str, path: str, body: bytes | None = None, *, retries: int | None = None,
                    timeout: float | None = None, deadline: Deadline | None = None) -> aiohttp.ClientResponse:
        """An answered request with a 2xx status (the caller reads and releases it); errors before
        that are retried as configured (pausing as `retry_pause` says, before `deadline`), then
        raised (`EndpointError`, aiohttp's, TimeoutError)."""
        retries = self.settings.max_retries if retries is None else retries
        seconds = timeout or self.settings.timeout
        limits = aiohttp.ClientTimeout(total=None, sock_connect=seconds, sock_read=seconds)
        attempt = 0
        while True:
            asked = None
            try:
                response = await self._session().request(method, f"{self.base_url}{path}", data=body,
                                                         headers=JSON_BODY if body is not None else None,
                                                         timeout=limits)
            except (aiohttp.ClientError, TimeoutError) as exc:
                failure: BaseException = exc
            else:
                if response.status < 300:
                    return response
                async with response:
                    asked = _retry_after(response.headers)
                    failure = EndpointError(response.status, _error_text(await response.read()), asked)
                if response.status not in RETRIED_STATUSES:
                    raise failure
            attempt += 1
            if attempt > retries:
                raise failure
            pause = retry_pause(attempt, asked, _remaining(deadline))
            if pause is None:
                if isinstance(failure, EndpointError):
                    failure.not_waited = True
                raise failure
            log.info("LLM request failed (%s); retry %d in %.1fs", for_logs(str(failure), self.base_url), attempt,
                     pause)
            await asyncio.sleep(pause)

    async def probe(self) -> str | None:
        """None when the endpoint answers a model listing, else a short reason."""
        try:
            await self.models()
        except Exception as exc:  # any failure is the answer
            return self._explain(exc)
        return None

    async def models(self) -> list[str]:
        """The model ids the endpoint lists (one try, 5 s)."""
        return [str(m.get("id")) for m in await self._listing()]

    async def _listing(self) -> list[dict[str, Any]]:
        async with await self._send("GET", "/models", retries=0, timeout=5.0) as response:
            listing = await response.json(content_type=None)
        return [m for m in listing.get("data") or () if isinstance(m, dict)] if isinstance(listing, dict) else []

    async def context_window(self) -> int | None:
        """The model's context window in tokens as the endpoint's model listing states it
        (`context_length`: OpenRouter, LM Studio; `max_model_len`: vLLM; `context_window`), or None
        when it does not say or cannot be asked."""
        try:
            listing = await self._listing()
        except Exception as exc:
            log.info("could not ask %s for the context window of %s: %s", redacted(self.base_url),
                     self.settings.model, self._explain(exc))
            return None
        entry = next((m for m in listing if m.get("id") == self.settings.model), None) or {}
        for key in ("context_length", "max_model_len", "context_window"):
            value = entry.get(key)
            if isinstance(value, int) and not isinstance(value, bool) and value >= 1024:
                return value
        return None

    async def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None, *,
                       on_text: TextSink | None = None, on_restart: Callback | None = None,
                       on_progress: Callable[[], None] | None = None,
                       deadline: Deadline | None = None) -> Completion:
        """One streamed completion; text deltas go to `on_text` as they arrive, and `on_progress`
        hears of every piece of the answer (text or tool calls). `deadline()` is when the caller
        stops waiting (the event loop's clock): no retry pauses past it."""
        attempt = 0
        while True:
            emitted: list[bool] = [False]
            started = time.monotonic()
            try:
                completion = await self._stream(messages, tools, on_text, emitted, on_progress, deadline)
            except _StreamBroke as exc:
                attempt += 1
                pause = retry_pause(attempt, None, _remaining(deadline))
                if attempt > self.settings.max_retries or pause is None:
                    raise LLMError(for_logs(str(exc.__cause__), self.base_url),
                                   self._explain(exc.__cause__)) from exc.__cause__
                log.warning("LLM stream broke (%s); retry %d", for_logs(str(exc.__cause__), self.base_url), attempt)
                if emitted[0]:
                    await _call(on_restart)
                await asyncio.sleep(pause)
                continue
            except (asyncio.CancelledError, LLMError):
                raise
            except Exception as exc:
                if self.ask_usage and _refuses_usage(exc):  # asked again at once, without it, from now on
                    log.info("the LLM endpoint refuses stream_options; asking without it from now on")
                    self.ask_usage = False
                    continue
                raise LLMError(for_logs(str(exc), self.base_url), self._explain(exc)) from exc
            if self.observer is not None:
                self.observer(time.monotonic() - started, completion.usage, self.settings.model)
            return completion

    async def _stream(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
                      on_text: TextSink | None, emitted: list[bool], on_progress: Callable[[], None] | None,
                      deadline: Deadline | None) -> Completion:
        body: dict[str, Any] = {"model": self.settings.model, "messages": messages, "stream": True}
        if self.ask_usage:  # token counts at the end of the stream (for /metrics); older servers refuse it
            body["stream_options"] = {"include_usage": True}
        if self.settings.temperature is not None:
            body["temperature"] = self.settings.temperature
        content: list[str] = []
        calls: dict[int, ToolCall] = {}
        finish: str | None = None
        usage: dict[str, int] | None = None
        async with await self._send("POST", "/chat/completions", _encode(body, tools), deadline=deadline) as response:
            try:
                async for data in _events(response):
                    if data == "[DONE]":
                        break
                    chunk = json.loads(data)
                    usage = chunk.get("usage") or usage
                    if "error" in chunk:
                        raise LLMError(for_logs(f"error in stream: {chunk['error']}", self.base_url),
                                       "The language model reported an error while answering. Please try again.")
                    for choice in chunk.get("choices") or ():
                        finish = choice.get("finish_reason") or finish
                        delta = choice.get("delta") or {}
                        if on_progress is not None and (delta.get("content") or delta.get("tool_calls")):
                            on_progress()
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
                else:
                    if finish is None:  # no [DONE] and no finish reason: the body was cut short
                        raise ConnectionResetError("the stream ended before the answer did")
            except (asyncio.CancelledError, LLMError):
                raise
            except Exception as exc:
                raise _StreamBroke(str(exc)) from exc
        tool_calls = [calls[i] for i in sorted(calls)]
        for i, call in enumerate(tool_calls):
            call.id = call.id or f"call_{i}"
        return Completion(content="".join(content), tool_calls=tool_calls, finish_reason=finish, usage=usage)

    def _explain(self, exc: BaseException | None) -> str:
        """A short, honest sentence for the person in the chat, naming no address."""
        if isinstance(exc, EndpointError):
            code = exc.status_code
            if code in (401, 403):
                return f"The language model refused the API key (HTTP {code}). Check llm.api_key."
            if code == 404:
                return f"The language model endpoint has no model {self.settings.model!r} (HTTP 404). Check llm.model."
            if exc.not_waited and exc.asked is not None:
                busy = "is rate-limiting requests" if code == 429 else "is unavailable"
                wait = _duration(exc.asked)
                return (f"The language model {busy} (HTTP {code}) and asks to wait {wait} before the next request, "
                        f"longer than I wait for an answer, so this message was not answered. Please try again in "
                        f"{wait}.")
            if code == 429:
                return "The language model is rate-limiting requests (HTTP 429) and did not recover. Please try again in a minute."
            if code >= 500:
                return f"The language model service failed (HTTP {code}) and did not recover after retries. Please try again shortly."
            said = for_people(exc.message, self.base_url)
            return f"The language model rejected the request (HTTP {code}): {said}"[:400]
        if isinstance(exc, TimeoutError):
            return f"The language model did not answer within {self.settings.timeout:.0f} s. Please try again."
        if isinstance(exc, ValueError):  # (aiohttp's InvalidURL too) the address itself
            return "The model endpoint's address cannot be used as it is. Check llm.base_url."
        if isinstance(exc, aiohttp.ClientError):
            return "I could not reach the model endpoint. Is it running? Check llm.base_url."
        return "The connection to the language model broke repeatedly while answering. Please try again."


async def _events(response: aiohttp.ClientResponse) -> AsyncIterator[str]:
    """The `data:` payloads of a server-sent event stream (lines of any length)."""
    pending = b""
    async for block in response.content.iter_any():
        pending += block
        *lines, pending = pending.split(b"\n")
        for line in lines:
            if line.startswith(b"data:"):
                yield line[5:].strip().decode("utf-8")
    if pending.startswith(b"data:"):
        yield pending[5:].strip().decode("utf-8")
