"""python-telegram-bot's requests over aiohttp (the gateway's own HTTP library) instead of httpx.

PTB lets the transport be replaced (`telegram.request.BaseRequest`); PTB still builds every
request and reads every answer (`RequestData`, `BaseRequest.post`/`retrieve`, its errors), this
only moves the bytes. The wire format is the one PTB's httpx transport sends — parameters as a
form, files as multipart — so Telegram (and the fakes) see the same requests. Measured against
PTB's default `HTTPXRequest` (pool 256) with bench/paired_ab.sh, 5 rounds: scenario C (1,000
answers) took 13.5 s and 10.2 ms of CPU per answer on httpx, 4.2 s and 2.1 ms on this.

No error raised here shows the URL: the bot token is part of it.
"""

from __future__ import annotations

import functools
from typing import Any

import aiohttp
from telegram.error import NetworkError, TimedOut
from telegram.request import BaseRequest, RequestData

_DEFAULT = type(BaseRequest.DEFAULT_NONE)  # PTB's "not given" marker
_FORM = {"Content-Type": "application/x-www-form-urlencoded"}


@functools.cache
def _timeout(read: float | None, connect: float | None, total: float | None) -> aiohttp.ClientTimeout:
    return aiohttp.ClientTimeout(total=total, sock_connect=connect, sock_read=read)


class AiohttpRequest(BaseRequest):
    """One pooled aiohttp session (a `Bot` has two: one for getUpdates, one for the rest)."""

    def __init__(self, *, pool_size: int, read_timeout: float = 30.0, connect_timeout: float = 10.0,
                 media_write_timeout: float = 60.0) -> None:
        self._pool_size = pool_size
        self._read_timeout = read_timeout
        self._connect_timeout = connect_timeout
        self._media_write_timeout = media_write_timeout
        self._session: aiohttp.ClientSession | None = None

    @property
    def read_timeout(self) -> float | None:
        return self._read_timeout

    async def initialize(self) -> None:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=self._pool_size, ttl_dns_cache=300),
                headers={"User-Agent": self.USER_AGENT})

    async def shutdown(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def do_request(self, url: str, method: str, request_data: RequestData | None = None,
                         read_timeout: Any = BaseRequest.DEFAULT_NONE, write_timeout: Any = BaseRequest.DEFAULT_NONE,
                         connect_timeout: Any = BaseRequest.DEFAULT_NONE,
                         pool_timeout: Any = BaseRequest.DEFAULT_NONE) -> tuple[int, bytes]:
        if self._session is None or self._session.closed:
            raise RuntimeError("This AiohttpRequest is not initialized!")
        files = request_data.multipart_data if request_data else None
        read = _given(read_timeout, self._read_timeout)
        connect = _given(connect_timeout, self._connect_timeout)
        total = None
        if files:  # an upload may take long to write: bounded as a whole instead
            total = (read or 0) + (_given(write_timeout, self._media_write_timeout) or 0) + (connect or 0) or None
        body, headers = _body(request_data, files)
        try:
            async with self._session.request(method, url, data=body, headers=headers,
                                             timeout=_timeout(read, connect, total)) as response:
                return response.status, await response.read()
        except TimeoutError as exc:
            raise TimedOut from exc
        except aiohttp.ClientError as exc:  # (its text may name the URL, and with it the token)
            text = f": {exc}".replace(url, "<url>") if str(exc) else ""
            raise NetworkError(f"aiohttp.{type(exc).__name__}{text}") from exc


def _given(value: Any, default: float | None) -> float | None:
    """A timeout PTB passed for this call, else ours."""
    return default if isinstance(value, _DEFAULT) else value


def _body(request_data: RequestData | None, files: Any) -> tuple[Any, dict[str, str] | None]:
    """The parameters as a form (values JSON-encoded, as PTB's own transport sends them): encoded
    by PTB (`url_encoded_parameters`), or multipart when a file goes up. (A dict handed to aiohttp
    is encoded through a `FormData` built per request, with a multipart writer it does not use:
    the largest part of aiohttp's request building in a profile of scenario A.)"""
    if request_data is None:
        return None, None
    if not files:
        form = request_data.url_encoded_parameters()
        return (form.encode(), _FORM) if form else (None, None)
    multipart = aiohttp.FormData()
    for name, value in request_data.json_parameters.items():
        multipart.add_field(name, value)
    for name, (filename, content, mime) in files.items():
        multipart.add_field(name, content, filename=filename, content_type=mime)
    return multipart, None
