"""The Bot API's HTTP calls, on the gateway's own aiohttp.

Every call is `POST {base}/bot<token>/<method>` with a JSON body (a multipart form when a file
goes up), answered by `{"ok": true, "result": …}` or `{"ok": false, "error_code": N,
"description": …, "parameters": {"retry_after": N}}`. That is the whole protocol the adapter
needs, so it speaks it here and leaves python-telegram-bot to what it is good at, its object
model of updates (imported only when an update needs it). The daemon no longer imports PTB to
start: it was a sixth of the time to ready and 7 MB of the idle process.

The token is part of every URL: no error or log line made here shows a URL, and any text that
might carry the token has it replaced.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import aiohttp

CONNECT_TIMEOUT = 10.0
READ_TIMEOUT = 30.0
JSON_HEADERS = {"Content-Type": "application/json"}


@functools.cache
def _timeout(seconds: float, *, total: bool = False) -> aiohttp.ClientTimeout:
    """A call's bounds: `seconds` between two reads, or for the whole call (an upload)."""
    if total:
        return aiohttp.ClientTimeout(total=seconds, sock_connect=CONNECT_TIMEOUT)
    return aiohttp.ClientTimeout(sock_connect=CONNECT_TIMEOUT, sock_read=seconds)


class BotAPIError(Exception):
    """A call that did not succeed. `status` is the HTTP status Telegram answered with (0: no
    answer at all — a network error, a timeout, or a body that is not the Bot API's)."""

    def __init__(self, method: str, status: int, description: str, *, retry_after: float | None = None) -> None:
        super().__init__(f"{method}: {description}" if status == 0 else f"{method}: {status} {description}")
        self.method = method
        self.status = status
        self.description = description
        self.retry_after = retry_after

    @property
    def token_refused(self) -> bool:
        return self.status in (401, 404)

    @property
    def transient(self) -> bool:
        """Trying again later can help (no answer, or the server's own trouble)."""
        return self.status == 0 or self.status >= 500


class BotAPI:
    """One bot's calls over one pooled aiohttp session (`open` before, `close` after)."""

    def __init__(self, token: str, base_url: str = "https://api.telegram.org", *, pool_size: int = 256) -> None:
        base = base_url.rstrip("/")
        self._token = token
        self._calls = f"{base}/bot{token}/"
        self._files = f"{base}/file/bot{token}/"
        self._pool_size = pool_size
        self._session: aiohttp.ClientSession | None = None

    async def open(self) -> None:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=self._pool_size, ttl_dns_cache=300),
                headers={"User-Agent": "chatgate"})

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def call(self, method: str, params: dict[str, Any] | None = None, *,
                   read_timeout: float = READ_TIMEOUT) -> Any:
        """The call's `result`; parameters that are None are left out."""
        body = json.dumps({k: v for k, v in (params or {}).items() if v is not None})
        return await self._post(method, body, JSON_HEADERS, _timeout(read_timeout))

    async def upload(self, method: str, params: dict[str, Any], field: str, filename: str, content: bytes, *,
                     timeout: float = 120.0) -> Any:
        """A call that sends a file: a multipart form, nested values as JSON text."""
        form = aiohttp.FormData()
        for name, value in params.items():
            if value is not None:
                form.add_field(name, value if isinstance(value, str) else json.dumps(value))
        form.add_field(field, content, filename=filename, content_type="application/octet-stream")
        return await self._post(method, form, None, _timeout(timeout, total=True))

    async def download(self, file_path: str, dest: Path, limit: int) -> int:
        """Stream a file (`getFile`'s `file_path`) to `dest`; more than `limit` bytes is refused
        (ValueError) and nothing is left behind. Returns the size."""
        session = self._open_session("download")
        size = 0
        try:
            async with session.get(self._files + file_path.lstrip("/"), timeout=_timeout(READ_TIMEOUT)) as response:
                if response.status != 200:
                    raise BotAPIError("download", response.status, response.reason or "download failed")
                with dest.open("wb") as out:
                    async for chunk in response.content.iter_chunked(64 * 1024):
                        size += len(chunk)
                        if size > limit:
                            raise ValueError(f"it is over {limit / 1e6:.0f} MB, the limit")
                        out.write(chunk)
        except (aiohttp.ClientError, TimeoutError) as exc:
            dest.unlink(missing_ok=True)
            raise self._unanswered("download", exc) from None
        except BaseException:
            dest.unlink(missing_ok=True)
            raise
        return size

    def _open_session(self, method: str) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            raise BotAPIError(method, 0, "the Bot API client is not open")
        return self._session

    async def _post(self, method: str, body: Any, headers: dict[str, str] | None,
                    timeout: aiohttp.ClientTimeout) -> Any:
        session = self._open_session(method)
        try:
            async with session.post(self._calls + method, data=body, headers=headers, timeout=timeout) as response:
                status, raw = response.status, await response.read()
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise self._unanswered(method, exc) from None
        try:
            answer = json.loads(raw)
        except ValueError:
            answer = None
        if not isinstance(answer, dict) or "ok" not in answer:
            raise BotAPIError(method, 0 if status < 400 else status,
                              f"not a Bot API answer (HTTP {status})")
        if answer["ok"] is True:
            return answer.get("result")
        parameters = answer.get("parameters")
        retry = parameters.get("retry_after") if isinstance(parameters, dict) else None
        code = answer.get("error_code")
        raise BotAPIError(method, code if isinstance(code, int) else status,
                          self._hidden(str(answer.get("description") or "refused")),
                          retry_after=float(retry) if isinstance(retry, int | float) else None)

    def _unanswered(self, method: str, exc: BaseException) -> BotAPIError:
        """No answer: a network error or a timeout (whose text may be empty)."""
        text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        return BotAPIError(method, 0, self._hidden(text))

    def _hidden(self, text: str) -> str:
        return text.replace(self._token, "<token>")
