"""Streaming chat completions for any OpenAI-compatible endpoint, through the official `openai` SDK.

The SDK (`AsyncOpenAI`, one per endpoint: see `Endpoints`) makes each request, retries what fails
before the answer starts (connection errors, timeouts, 408/409/429/5xx: `max_retries`, its backoff,
the endpoint's `retry-after`), reads the server-sent events and raises its error types. What is
ours, and small:

- a `retry-after` that is not waited out: longer than `MAX_RETRY_AFTER`, or ending after the
  caller's deadline. A response hook on the SDK's HTTP client tells the SDK not to retry (the
  `x-should-retry: false` header, which it obeys), and the person is told at once how long the
  endpoint asks to wait (`retry_pause` is the policy);
- asking again when a stream breaks after it started (the SDK does not replay a stream it handed
  over), the sink told to start over;
- an endpoint that refuses `stream_options` is asked without it from then on;
- the context window, read from the model listing;
- what is left becomes an `LLMError` whose `user_message` is honest and short and names no address
  (`llm.base_url` may hold credentials: see `agent.endpoint`); its message, for the log, shows the
  address redacted;
- counting, for /metrics (`LLMClient.trouble`), the requests that failed for good and the ones the SDK
  made again, by kind. The retries are seen through the documented surface the SDK offers, its HTTP
  client's event hooks: every request of one call after the first is a retry, of the kind of the
  failure before it (the status the response hook saw; none: no answer at all).

How the SDK is used, as measured (CPU per request, 300 concurrent streams against the shared
bench's fake LLM; see the commit messages): its aiohttp transport (`DefaultAioHttpClient`: a
third to a half of the default httpx2 pool's); the request as the JSON the messages and tools
already are, through the SDK's documented `client.post` with a prepared body (the typed `create`
walks every message through the union of message types, 31 ms for 100 messages and 13 tools, and
serialises with `json.dumps`; neither changes plain dicts); the chunks read as dicts
(`AsyncStream[object]`: no model object per chunk). The SDK is imported at the first request, in a worker thread (about a second): off the
event loop and off the way to ready.
"""

from __future__ import annotations

import asyncio
import contextvars
import importlib
import inspect
import json
import logging
import math
import random
import time
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime
from typing import Any, Awaitable, Callable, TypeVar

import aiohttp
import pydantic_core

from agent.endpoint import for_logs, for_people, redacted

log = logging.getLogger(__name__)
R = TypeVar("R")

TextSink = Callable[[str], Awaitable[None] | None]
Callback = Callable[[], Awaitable[None] | None]
Deadline = Callable[[], float]  # when the caller stops waiting, on the event loop's clock

OPENAI_URL = "https://api.openai.com/v1"
BROKE = "The connection to the language model broke repeatedly while answering. Please try again."


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
    """The model could not answer; `user_message` is what the person in the chat is told, `kind` what
    failed (`failure_kind`; "stream": the answer broke off, "deadline": `turn_timeout` ran out)."""

    def __init__(self, message: str, user_message: str, kind: str = "other") -> None:
        super().__init__(message)
        self.user_message = user_message
        self.kind = kind


def status_kind(status: int | None) -> str:
    """What a failed request's HTTP status says (None: no answer came at all)."""
    if status is None:
        return "connection"
    named = {429: "rate_limit", 408: "timeout", 409: "conflict", 401: "auth", 403: "auth"}
    return named.get(status) or ("server" if status >= 500 else "rejected")


_openai: Any = None  # the `openai` module, once imported


async def sdk() -> Any:
    """The `openai` package, imported in a worker thread the first time (about a second, not on the loop).
    The daemon calls it once it is ready, so that the first message does not wait for the import."""
    global _openai
    if _openai is None:
        _openai = await asyncio.to_thread(importlib.import_module, "openai")
    return _openai


# -- the retry-after policy ------------------------------------------------------------------------

RETRIED_STATUSES = frozenset({408, 409, 429}) | frozenset(range(500, 600))  # what the SDK retries
MAX_RETRY_AFTER = 60.0  # a longer retry-after is not waited out: the person is told instead


def retry_pause(attempt: int, asked: float | None, remaining: float | None) -> float | None:
    """Seconds to wait before retry number `attempt` (1, 2, …), or None: do not retry, say so now.

    `asked` is the endpoint's retry-after: honoured when it is at most `MAX_RETRY_AFTER` (never
    retried earlier than asked), else not waited out. Without one, an exponential backoff (0.5 s
    doubling to 8 s, jittered, as the SDK's). A pause that would end after the deadline (`remaining`
    seconds from now; None: no deadline) is not taken either: the caller would only time out waiting."""
    if asked is not None and asked >= 0:
        if asked > MAX_RETRY_AFTER:
            return None
        pause = asked
    else:
        pause = min(0.5 * 2 ** (attempt - 1), 8.0) * (1 - 0.25 * random.random())
    return None if remaining is not None and pause >= remaining else pause


def _retry_after(headers: Any) -> float | None:
    """Seconds the endpoint asks us to wait (`retry-after-ms`, or `retry-after` in seconds or as an HTTP date)."""
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        try:
            return float(headers[name]) * scale
        except (KeyError, TypeError, ValueError):
            continue
    try:
        return max(0.0, parsedate_to_datetime(headers["retry-after"]).timestamp() - time.time())
    except (KeyError, TypeError, ValueError, IndexError):
        return None


@dataclass(slots=True)
class _Wait:
    """One completion, for the HTTP client's hooks: its deadline, a retry-after not waited out, and the
    requests of the current call (how many went out, the status of the last answer, who counts retries)."""

    deadline: Deadline | None
    declined: float | None = None
    retried: Callable[[str], None] | None = None
    sent: int = 0
    status: int | None = None


_WAIT: contextvars.ContextVar[_Wait | None] = contextvars.ContextVar("chatgate_llm_wait", default=None)


def _remaining(deadline: Deadline | None) -> float | None:
    return None if deadline is None else deadline() - asyncio.get_running_loop().time()


async def _count_retries(request: Any) -> None:
    """A request hook of the SDK's HTTP client: a request after the first of one call is the SDK's
    retry, of the kind of the failure before it."""
    wait = _WAIT.get()
    if wait is None:
        return
    wait.sent += 1
    if wait.sent > 1 and wait.retried is not None:
        wait.retried(status_kind(wait.status))
    wait.status = None


async def _refuse_long_waits(response: Any) -> None:
    """A response hook of the SDK's HTTP client: a retry-after the current call will not wait out
    (see `retry_pause`) makes the response final for the SDK, and is remembered for the person."""
    wait = _WAIT.get()
    if wait is not None:
        wait.status = response.status_code
    if response.status_code not in RETRIED_STATUSES:
        return
    asked = _retry_after(response.headers)
    if asked is None or asked <= 0:
        return
    if retry_pause(1, asked, _remaining(wait.deadline) if wait else None) is None:
        response.headers["x-should-retry"] = "false"
        if wait is not None:
            wait.declined = asked


class Endpoints:
    """The SDK's clients, one per endpoint (address, key, timeout, retries), made at first use and
    shared by every `LLMClient` on that endpoint (main and auxiliary models); closed together."""

    def __init__(self) -> None:
        self._clients: dict[tuple[str, str | None, float, int], Any] = {}

    async def client(self, settings: LLMSettings) -> Any:
        key = (settings.base_url or OPENAI_URL, settings.api_key, settings.timeout, settings.max_retries)
        client = self._clients.get(key)
        if client is None:
            openai = await sdk()
            client = self._clients.get(key)  # (another turn may have made it meanwhile)
            if client is None:
                client = self._clients[key] = openai.AsyncOpenAI(
                    base_url=key[0], api_key=settings.api_key or "not-needed", max_retries=settings.max_retries,
                    timeout=settings.timeout,
                    http_client=openai.DefaultAioHttpClient(event_hooks={"request": [_count_retries],
                                                                          "response": [_refuse_long_waits]}))
        return client

    async def aclose(self) -> None:
        clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            await client.close()


# -- the client ------------------------------------------------------------------------------------

async def _call(fn: Callable[..., Any] | None, *args: Any) -> None:
    if fn is not None:
        result = fn(*args)
        if inspect.isawaitable(result):
            await result


def _refuses_usage(exc: BaseException) -> bool:
    """An endpoint rejecting the request because of stream_options (a 400/422 naming it)."""
    return getattr(exc, "status_code", None) in (400, 422) and "stream_options" in f"{exc} {getattr(exc, 'body', '')}"


class _StreamBroke(Exception):
    """The response had started when the connection failed: worth another try."""


def _duration(seconds: float) -> str:
    """"45 s", "2 minutes", "3 hours": how long, for a person."""
    if seconds < 90:
        return f"{math.ceil(seconds)} s"
    if seconds < 90 * 60:
        return f"{math.ceil(seconds / 60)} minutes"
    return f"{math.ceil(seconds / 3600)} hours"


def _timed_out(exc: BaseException | None) -> bool:
    """The SDK's timeout error, when it is one: its aiohttp transport also reports a refused or
    unresolvable connection as a connect timeout (the broad `ClientConnectionError` comes first in its
    exception map; noted in openai-python's pull request #3594), so the cause decides."""
    if _openai is None or not isinstance(exc, _openai.APITimeoutError):
        return False
    while exc is not None:
        if isinstance(exc, aiohttp.ClientConnectorError):
            return False
        exc = exc.__cause__
    return True


def _said(body: object) -> str:
    """What an endpoint's error body says (its `error.message`, else the body itself)."""
    error = body.get("error", body) if isinstance(body, dict) else body
    message = error.get("message") if isinstance(error, dict) else error
    return str(message).strip()[:500] if message else "no details"


def timed_out_text(seconds: float) -> str:
    return (f"⏱ The language model did not answer in time (nothing came for {seconds:g} s), so I stopped waiting "
            "and this message was not answered. Please try again in a while.")


class LLMClient:
    """Streams chat completions of one model through the SDK client of its endpoint."""

    def __init__(self, settings: LLMSettings, endpoints: Endpoints | None = None) -> None:
        """`endpoints`: the shared SDK clients (their owner closes them); None: this client's own."""
        self.settings = settings
        self.base_url = (settings.base_url or OPENAI_URL).rstrip("/")
        self._endpoints = endpoints or Endpoints()
        self._owns_endpoints = endpoints is None
        self.observer: Callable[[float, dict[str, int] | None, str], None] | None = None  # (s, usage, model)
        self.trouble: Callable[[str, str], None] | None = None  # ("error" | "retry", kind), for /metrics
        self.ask_usage = True  # stream_options.include_usage, until an endpoint refuses it
        self._schemas: dict[int, tuple[list[dict[str, Any]], bytes]] = {}  # tools' JSON, by their list (see `_body`)

    async def within(self, call: Callable[[Callable[[], None] | None, Deadline | None], Awaitable[R]]) -> R:
        """`call(progress, deadline)`: one wait on the model (or on work for it), ended after
        `settings.turn_timeout` seconds (an `LLMError` then); each `progress()` gives it that long again."""
        seconds = self.settings.turn_timeout
        if seconds is None:
            return await call(None, None)
        loop = asyncio.get_running_loop()
        limit = asyncio.timeout(seconds)
        try:
            async with limit:
                return await call(lambda: limit.reschedule(loop.time() + seconds), limit.when)  # type: ignore[arg-type]
        except TimeoutError:
            if not limit.expired():
                raise
            self._count("error", "deadline")
            raise LLMError(f"the model sent nothing for {seconds:g} s; the turn stopped waiting",
                           timed_out_text(seconds), "deadline") from None

    def _count(self, what: str, kind: str) -> None:
        if self.trouble is not None:
            self.trouble(what, kind)

    async def aclose(self) -> None:
        if self._owns_endpoints:
            await self._endpoints.aclose()

    async def probe(self) -> str | None:
        """None when the endpoint answers a model listing, else a short reason."""
        try:
            await self._listing()
        except Exception as exc:  # any failure is the answer
            return self._explain(exc)
        return None

    async def models(self) -> list[str]:
        """The model ids the endpoint lists (one try, 5 s)."""
        return [str(m.get("id")) for m in await self._listing()]

    async def _listing(self) -> list[dict[str, Any]]:
        client = (await self._endpoints.client(self.settings)).with_options(max_retries=0, timeout=5.0)
        return [model.to_dict() async for model in client.models.list()]

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
        wait = _Wait(deadline, retried=lambda kind: self._count("retry", kind))
        token = _WAIT.set(wait)
        try:
            attempt = 0
            while True:
                emitted: list[bool] = [False]
                started = time.monotonic()
                wait.sent = 0  # (a new call: its first request is no retry)
                try:
                    completion = await self._stream(messages, tools, on_text, emitted, on_progress)
                except _StreamBroke as exc:
                    cause = exc.__cause__
                    attempt += 1
                    pause = retry_pause(attempt, None, _remaining(deadline))
                    if attempt > self.settings.max_retries or pause is None:
                        timed_out = _timed_out(cause)
                        raise LLMError(self._for_logs(cause), self._explain(cause) if timed_out else BROKE,
                                       "timeout" if timed_out else "stream") from cause
                    log.warning("LLM stream broke (%s); retry %d", self._for_logs(cause), attempt)
                    self._count("retry", "stream")
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
                    raise LLMError(self._for_logs(exc), self._explain(exc, wait.declined),
                                   self._kind(exc)) from exc
                if self.observer is not None:
                    self.observer(time.monotonic() - started, completion.usage, self.settings.model)
                return completion
        except LLMError as exc:
            self._count("error", exc.kind)
            raise
        finally:
            _WAIT.reset(token)

    async def _stream(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
                      on_text: TextSink | None, emitted: list[bool],
                      on_progress: Callable[[], None] | None) -> Completion:
        content: list[str] = []
        calls: dict[int, ToolCall] = {}
        finish: str | None = None
        usage: dict[str, int] | None = None
        client = await self._endpoints.client(self.settings)
        stream = await client.post("/chat/completions", content=self._body(messages, tools), cast_to=object,
                                   stream=True, stream_cls=_openai.AsyncStream[object])  # chunks: the dicts they are
        async with stream:
            try:
                async for chunk in stream:
                    usage = chunk.get("usage") or usage
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
                if finish is None:  # no finish reason: the body was cut short
                    raise ConnectionResetError("the stream ended before the answer did")
            except (asyncio.CancelledError, LLMError):
                raise
            except _openai.APIConnectionError as exc:  # (a timeout too)
                raise _StreamBroke(str(exc)) from exc
            except _openai.APIError as exc:  # an error event in the stream
                raise LLMError(for_logs(f"error in stream: {exc.body}", self.base_url),
                               "The language model reported an error while answering. Please try again.",
                               "stream") from exc
            except Exception as exc:
                raise _StreamBroke(str(exc)) from exc
        tool_calls = [calls[i] for i in sorted(calls)]
        for i, call in enumerate(tool_calls):
            call.id = call.id or f"call_{i}"
        return Completion(content="".join(content), tool_calls=tool_calls, finish_reason=finish, usage=usage)

    def _body(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> bytes:
        """The request's JSON, made by pydantic-core's serializer (a fifth of the cost of the SDK's
        `json.dumps` of the same dicts, which are already what the endpoint takes: see the module's words).
        The tools' schemas, nine tenths of a short conversation's request, are serialised once per list:
        a set of tools has one list, made once and never changed (agent.tools.contract)."""
        body: dict[str, Any] = {"model": self.settings.model, "messages": messages, "stream": True}
        if self.ask_usage:  # token counts at the end of the stream (for /metrics); older servers refuse it
            body["stream_options"] = {"include_usage": True}
        if self.settings.temperature is not None:
            body["temperature"] = self.settings.temperature
        try:
            return self._fast_body(body, tools)
        except pydantic_core.PydanticSerializationError:  # (a lone surrogate: a model's `\\ud83d` read by the SDK,
            return json.dumps({"tools": tools, **body} if tools else body).encode()  # a tool's echo of it: escaped)

    def _fast_body(self, body: dict[str, Any], tools: list[dict[str, Any]] | None) -> bytes:
        if not tools:
            return pydantic_core.to_json(body)
        known = self._schemas.get(id(tools))
        if known is None or known[0] is not tools:
            if len(self._schemas) >= 16:  # (lists made by hand, one per request: nothing to keep)
                self._schemas.clear()
            known = self._schemas[id(tools)] = (tools, pydantic_core.to_json(tools))
        return b'{"tools":' + known[1] + b"," + pydantic_core.to_json(body)[1:]

    def _for_logs(self, exc: BaseException | None) -> str:
        """An error as a log line shows it: the SDK's words and their cause, the address redacted."""
        cause = exc.__cause__ if exc is not None else None
        return for_logs(f"{exc}" + (f" ({cause})" if cause is not None and str(cause) else ""), self.base_url)

    @staticmethod
    def _kind(exc: BaseException) -> str:
        """What failed, for /metrics: the HTTP status's kind, else timeout, connection or other."""
        openai = _openai
        if openai is not None and isinstance(exc, openai.APIStatusError):
            return status_kind(exc.status_code)
        if _timed_out(exc):
            return "timeout"
        return "connection" if openai is not None and isinstance(exc, openai.APIConnectionError) else "other"

    def _explain(self, exc: BaseException | None, declined: float | None = None) -> str:
        """A short, honest sentence for the person in the chat, naming no address. `declined`: the
        retry-after (seconds) that was not waited out, when that is why this error was final."""
        openai = _openai
        if openai is None:  # (the SDK was not even imported)
            return BROKE
        import httpx2  # (the SDK's HTTP library, loaded with it)

        if isinstance(exc, openai.APIStatusError):
            code = exc.status_code
            if code in (401, 403):
                return f"The language model refused the API key (HTTP {code}). Check llm.api_key."
            if code == 404:
                return f"The language model endpoint has no model {self.settings.model!r} (HTTP 404). Check llm.model."
            if declined is not None:
                busy = "is rate-limiting requests" if code == 429 else "is unavailable"
                wait = _duration(declined)
                return (f"The language model {busy} (HTTP {code}) and asks to wait {wait} before the next request, "
                        f"longer than I wait for an answer, so this message was not answered. Please try again in "
                        f"{wait}.")
            if code == 429:
                return "The language model is rate-limiting requests (HTTP 429) and did not recover. Please try again in a minute."
            if code >= 500:
                return f"The language model service failed (HTTP {code}) and did not recover after retries. Please try again shortly."
            said = for_people(_said(exc.body), self.base_url)
            return f"The language model rejected the request (HTTP {code}): {said}"[:400]
        if _timed_out(exc):
            return f"The language model did not answer within {self.settings.timeout:.0f} s. Please try again."
        if isinstance(exc, openai.APIConnectionError):
            return "I could not reach the model endpoint. Is it running? Check llm.base_url."
        if isinstance(exc, (ValueError, httpx2.InvalidURL)):  # the address itself
            return "The model endpoint's address cannot be used as it is. Check llm.base_url."
        return BROKE
