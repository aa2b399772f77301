"""A fake OpenAI-compatible chat-completions server for tests and benchmarks.

It runs in-process on a loopback port, so the real ``openai.AsyncOpenAI`` client (which uses
httpx2 and cannot be mocked in-process) talks to it over a real socket::

    async with FakeLLM() as llm:
        llm.script(Reply.text("hi"), Reply.error(429, retry_after=1))
        client = openai.AsyncOpenAI(base_url=llm.base_url, api_key="x")
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import json
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from aiohttp import web

ToolCallSpec = tuple[str, "dict[str, Any] | str"]
Delta = tuple[dict[str, Any], "str | None"]  # (delta, finish_reason) of one streamed chunk
Responder = Callable[[dict[str, Any]], "Reply | None | Awaitable[Reply | None]"]

_ERROR_KINDS: dict[int, tuple[str, str]] = {
    400: ("invalid_request_error", "invalid_request"),
    401: ("authentication_error", "invalid_api_key"),
    403: ("permission_error", "forbidden"),
    404: ("invalid_request_error", "model_not_found"),
    429: ("rate_limit_error", "rate_limit_exceeded"),
}


@dataclass(frozen=True, slots=True)
class Reply:
    """One scripted answer. Build it with the class methods, not the constructor."""

    kind: Literal["text", "tool_calls", "error", "disconnect", "hang"]
    content: str = ""
    calls: tuple[tuple[str, str], ...] = ()
    delay: float = 0.0
    chunk_size: int = 8
    chunk_delay: float = 0.0
    status: int = 200
    message: str = ""
    retry_after: float | None = None
    after_chunks: int = 0
    hold: asyncio.Event | None = None  # streamed: the first piece, then the rest once this is set

    @classmethod
    def text(
        cls, content: str, delay: float = 0.0, chunk_size: int = 8, chunk_delay: float = 0.0,
        hold: asyncio.Event | None = None,
    ) -> Reply:
        """A plain assistant message, streamed in pieces of ``chunk_size`` characters; with ``hold``,
        the first piece goes out at once and the rest once ``hold`` is set (a test orders what the
        gateway does with the start of an answer before its end)."""
        size = max(1, chunk_size)
        return cls("text", content, delay=delay, chunk_size=size, chunk_delay=chunk_delay, hold=hold)

    @classmethod
    def tool_calls(
        cls,
        calls: Sequence[ToolCallSpec],
        content: str = "",
        delay: float = 0.0,
        chunk_delay: float = 0.0,
        hold: asyncio.Event | None = None,
    ) -> Reply:
        """Tool calls; dict arguments are JSON-encoded, str arguments are sent verbatim (``hold``: as
        for ``text``)."""
        encoded = tuple(
            (name, args if isinstance(args, str) else json.dumps(args)) for name, args in calls
        )
        return cls("tool_calls", content, encoded, delay=delay, chunk_delay=chunk_delay, hold=hold)

    @classmethod
    def error(
        cls, status: int, retry_after: float | None = None, message: str = "", delay: float = 0.0
    ) -> Reply:
        """An HTTP error with an OpenAI-style JSON body (and ``retry-after`` when given)."""
        return cls("error", status=status, retry_after=retry_after, message=message, delay=delay)

    @classmethod
    def disconnect(
        cls, after_chunks: int = 1, content: str = "this reply is cut off", delay: float = 0.0
    ) -> Reply:
        """Stream the role chunk and ``after_chunks`` content chunks, then close the connection.

        No finish chunk and no ``[DONE]``: the client sees an incomplete body. On a
        non-streaming request the connection is closed before any response.
        """
        return cls("disconnect", content, delay=delay, after_chunks=after_chunks)

    @classmethod
    def hang(cls) -> Reply:
        """Never answer, until the client disconnects or the server stops."""
        return cls("hang")


class FakeLLM:
    """An aiohttp server speaking the parts of the OpenAI API that chatgate uses."""

    def __init__(
        self,
        latency: float = 0.0,
        *,
        models: Sequence[str] = (),
        repeat_tool_name: bool = False,
        host: str = "127.0.0.1",
    ) -> None:
        self.latency = latency
        self.models = ["fake-model", *models]
        self.repeat_tool_name = repeat_tool_name
        self.host = host
        self.port = 0
        self.requests: list[dict[str, Any]] = []
        self.streamed = 0  # streamed answers written to the end (the client may not have read them yet)
        self.context_lengths: dict[str, int] = {}  # stated in the model listing as `context_length`
        self.authorizations: list[str] = []  # the Authorization header of each chat request
        self.responder: Responder | None = None
        self._queue: deque[Reply] = deque()
        self._cond = asyncio.Condition()
        self._ids = itertools.count(1)
        self._stopping = asyncio.Event()
        self._runner: web.AppRunner | None = None

    @property
    def base_url(self) -> str:
        """The URL to pass as ``base_url`` to the OpenAI client."""
        return f"http://{self.host}:{self.port}/v1"

    async def start(self) -> None:
        """Bind a free loopback port and start serving."""
        app = web.Application(client_max_size=64 * 1024**2)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_get("/v1/models", self._models)
        # handler_cancellation: a client that goes away cancels its handler (ends hang/delay)
        self._runner = web.AppRunner(
            app, shutdown_timeout=0.1, handler_cancellation=True, access_log=None
        )
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, 0, backlog=4096)
        await site.start()
        self.port = self._runner.addresses[0][1]
        self._stopping.clear()

    async def stop(self) -> None:
        """Stop serving; open ``hang`` requests are dropped, other handlers get 0.1 s."""
        self._stopping.set()
        if self._runner is not None:
            runner, self._runner = self._runner, None
            await runner.cleanup()

    async def __aenter__(self) -> FakeLLM:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def script(self, *replies: Reply) -> None:
        """Queue replies; each incoming request consumes the oldest one."""
        self._queue.extend(replies)

    async def wait_for_requests(self, n: int, timeout: float = 5.0) -> list[dict[str, Any]]:
        """Wait until at least ``n`` requests were received; return all of them."""
        try:
            async with asyncio.timeout(timeout):
                async with self._cond:
                    await self._cond.wait_for(lambda: len(self.requests) >= n)
        except TimeoutError:
            last = _last_user_text(self.requests[-1]) if self.requests else None
            raise TimeoutError(
                f"FakeLLM: expected {n} chat request(s) within {timeout}s, got {len(self.requests)}"
                f" (last user message: {last!r}; {len(self._queue)} scripted replies unused)"
            ) from None
        return self.requests

    async def wait_for_streamed(self, n: int, timeout: float = 5.0) -> None:
        """Wait until at least ``n`` streamed answers were written to the end."""
        async with asyncio.timeout(timeout):
            async with self._cond:
                await self._cond.wait_for(lambda: self.streamed >= n)

    # -- handlers ---------------------------------------------------------------------------

    async def _models(self, request: web.Request) -> web.Response:
        data = [{"id": m, "object": "model", "created": 0, "owned_by": "fake",
                 **({"context_length": self.context_lengths[m]} if m in self.context_lengths else {})}
                for m in self.models]
        return web.json_response({"object": "list", "data": data})

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        try:
            body = await request.json()
        except ValueError:
            return _error_response(400, "request body is not valid JSON")
        if not isinstance(body, dict):
            return _error_response(400, "request body must be a JSON object")
        self.requests.append(body)
        self.authorizations.append(request.headers.get("Authorization", ""))
        async with self._cond:
            self._cond.notify_all()

        reply = await self._choose(body)
        if reply.delay > 0:
            await asyncio.sleep(reply.delay)
        if reply.kind == "error":
            return _error_response(reply.status, reply.message, reply.retry_after)
        if reply.kind == "hang":
            await self._stopping.wait()
            _close(request)
            return web.Response(status=503)
        call_ids = [f"call_{next(self._ids)}" for _ in reply.calls]
        if body.get("stream"):
            response = await self._stream(request, body, reply, call_ids)
            self.streamed += 1
            async with self._cond:
                self._cond.notify_all()
            return response
        if reply.kind == "disconnect":
            _close(request)
            return web.Response(status=503)
        return web.json_response(self._completion(body, reply, call_ids))

    async def _choose(self, body: dict[str, Any]) -> Reply:
        """The next scripted reply, else the responder's, else the default echo."""
        if self._queue:
            return self._queue.popleft()
        if self.responder is not None:
            reply = self.responder(body)
            if inspect.isawaitable(reply):
                reply = await reply
            if reply is not None:
                return reply
        return Reply.text(f"echo: {_last_user_text(body)}", delay=self.latency)

    async def _stream(
        self, request: web.Request, body: dict[str, Any], reply: Reply, call_ids: list[str]
    ) -> web.StreamResponse:
        """Answer as SSE; with ``chunk_delay == 0`` the whole stream goes out in one write."""
        resp = web.StreamResponse(headers={"Cache-Control": "no-cache"})
        resp.content_type = "text/event-stream"
        await resp.prepare(request)
        head = {"id": f"chatcmpl-{next(self._ids)}", "object": "chat.completion.chunk",
                "created": int(time.time()), "model": body.get("model") or "fake-model"}
        events = [
            _sse({**head, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
            for delta, finish in self._deltas(reply, call_ids)
        ]
        if reply.kind == "disconnect":
            events = events[: 1 + reply.after_chunks]
        else:
            if (body.get("stream_options") or {}).get("include_usage"):
                events.append(_sse({**head, "choices": [], "usage": _usage(body, reply)}))
            events.append(b"data: [DONE]\n\n")

        if reply.hold is not None:  # the role chunk and the first piece, then the rest when let go
            await resp.write(b"".join(events[:2]))
            await reply.hold.wait()
            events = events[2:]
        if reply.chunk_delay > 0:
            for i, event in enumerate(events):
                if i:
                    await asyncio.sleep(reply.chunk_delay)
                await resp.write(event)
        elif events:
            await resp.write(b"".join(events))
        if reply.kind == "disconnect":
            _close(request)
            return resp
        await resp.write_eof()
        return resp

    def _deltas(self, reply: Reply, call_ids: list[str]) -> list[Delta]:
        """The (delta, finish_reason) pairs of a streamed reply, in order."""
        out: list[Delta] = [({"role": "assistant", "content": ""}, None)]
        size = reply.chunk_size
        for i in range(0, len(reply.content), size):
            out.append(({"content": reply.content[i : i + size]}, None))
        for index, ((name, args), call_id) in enumerate(zip(reply.calls, call_ids)):
            first = {"index": index, "id": call_id, "type": "function",
                     "function": {"name": name, "arguments": ""}}
            out.append(({"tool_calls": [first]}, None))
            for piece in _split(args, 3):
                function = {"arguments": piece}
                if self.repeat_tool_name:
                    function = {"name": name, **function}
                out.append(({"tool_calls": [{"index": index, "function": function}]}, None))
        out.append(({}, "tool_calls" if reply.calls else "stop"))
        return out

    def _completion(
        self, body: dict[str, Any], reply: Reply, call_ids: list[str]
    ) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": reply.content or None}
        if reply.calls:
            message["tool_calls"] = [
                {"id": call_id, "type": "function", "function": {"name": name, "arguments": args}}
                for (name, args), call_id in zip(reply.calls, call_ids)
            ]
        elif message["content"] is None:
            message["content"] = ""
        return {
            "id": f"chatcmpl-{next(self._ids)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model") or "fake-model",
            "choices": [{"index": 0, "message": message, "logprobs": None,
                         "finish_reason": "tool_calls" if reply.calls else "stop"}],
            "usage": _usage(body, reply),
        }


# -- helpers ---------------------------------------------------------------------------------


def _sse(chunk: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(chunk, separators=(",", ":")).encode() + b"\n\n"


def _split(text: str, parts: int) -> list[str]:
    """Split ``text`` into at most ``parts`` non-empty pieces (one empty piece for "")."""
    if not text:
        return [""]
    step = max(1, -(-len(text) // parts))
    return [text[i : i + step] for i in range(0, len(text), step)]


def _text_of(content: Any) -> str:
    """The text of a message ``content``: a string or a list of content parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


def _last_user_text(body: dict[str, Any]) -> str:
    for message in reversed(body.get("messages") or []):
        if isinstance(message, dict) and message.get("role") == "user":
            return _text_of(message.get("content"))
    return ""


def _usage(body: dict[str, Any], reply: Reply) -> dict[str, int]:
    """A rough token count (4 characters a token), cheap enough for benchmarks."""
    messages = body.get("messages") or []
    prompt = sum(len(_text_of(m.get("content"))) for m in messages if isinstance(m, dict)) // 4 + 1
    completion = (len(reply.content) + sum(len(n) + len(a) for n, a in reply.calls)) // 4 + 1
    total = prompt + completion
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": total}


def _error_response(
    status: int, message: str = "", retry_after: float | None = None
) -> web.Response:
    fallback = ("server_error" if status >= 500 else "invalid_request_error", str(status))
    kind, code = _ERROR_KINDS.get(status, fallback)
    text = message or f"fake error {status}"
    error = {"message": text, "type": kind, "param": None, "code": code}
    headers = {}
    if retry_after is not None:
        whole = float(retry_after).is_integer()
        headers["retry-after"] = str(int(retry_after)) if whole else str(retry_after)
    return web.json_response({"error": error}, status=status, headers=headers)


def _close(request: web.Request) -> None:
    """Close the connection under ``request`` (buffered bytes are still flushed)."""
    if request.transport is not None:
        request.transport.close()
