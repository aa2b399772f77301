"""The local web chat: one page and a websocket on the gateway's HTTP server.

Each browser tab is a chat (its id lives in the tab's sessionStorage). Both directions are
acknowledged: the page resends a message until the server acks it (sent only after the gateway
stored it; ids make resending safe), and a finished reply counts as delivered only when the
page says it received it (`{"type": "received"}`) within `ack_timeout` seconds. A reply the page
did not confirm stays in the gateway's outbox and is sent again, under the same message id
(the page replaces rather than repeats), when the tab reconnects.

The page learns the gateway's message limit from `hello` and refuses a longer text itself; one that
reaches the server anyway is answered with an error frame and a rejected ack (so it is not resent).

The page also shows the task board, when the gateway hands one over (`show_board`): it asks for it
(`GET /board`, a task's events: `GET /board/<id>`) every few seconds while the board is open, through
the same checks as the chat, with the token in a header (`access.TOKEN_HEADER`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import secrets
from typing import Any, Awaitable, Callable, Sequence

from aiohttp import WSMsgType, web

from platforms.base import (
    BoardView,
    ButtonPress,
    Capabilities,
    ChatOpened,
    ChatRef,
    ChatUnavailable,
    InboundMessage,
    Intake,
    PlatformAdapter,
    Reply,
)
from platforms.webchat.access import TOKEN_HEADER, Gate, entry_url, header_token
from platforms.webchat.pages import DATA_HEADERS, chat_page, locked_page
from platforms.webchat.render import to_html_or_none

log = logging.getLogger(__name__)

_CHAT_ID = re.compile(r"^[A-Za-z0-9_-]{8,64}$")


def frame_limit(max_chars: int) -> int:
    """The largest websocket frame read, in bytes: above any message of `max_chars` characters (in JSON
    at most 12 bytes each: `\\ud83d\\ude00`), and at least 1 MiB, so an over-long paste is answered with
    an error frame, not a closed socket. Only a larger frame is cut off (aiohttp closes with 1009)."""
    return max(1 << 20, 12 * max_chars + 64 * 1024)


def _buttons(reply: Reply) -> list[list[dict[str, str]]] | None:
    return [[{"text": b.text, "data": b.data} for b in row] for row in reply.buttons] or None


def _content(reply: Reply) -> dict[str, Any]:
    """What a message or edit frame shows: the Markdown as written (`text`), the same rendered
    as safe HTML (`html`, None if rendering failed: the page then shows the text) and buttons."""
    return {"text": reply.text, "html": to_html_or_none(reply.text), "buttons": _buttons(reply)}


class WebChatAdapter(PlatformAdapter):
    name = "webchat"
    capabilities = Capabilities(max_length=16_000, markup="markdown", can_edit=True, can_buttons=True,
                                can_typing=True, edit_interval=0.1, local=True, keyed_sends=True)

    def __init__(self, *, gate: Gate | None = None, user_id: str = "local", user_name: str = "you",
                 ack_timeout: float = 10.0, max_chars: int = 32_000) -> None:
        super().__init__()
        self.gate = gate or Gate("127.0.0.1", None, None)
        self.max_chars = max_chars  # the gateway's limit (`gateway.max_message_chars`): the page checks it first
        self._user_id, self._user_name = user_id, user_name
        self.ack_timeout = ack_timeout
        self._sockets: dict[str, set[web.WebSocketResponse]] = {}
        self._acks: dict[tuple[str, str], asyncio.Future[None]] = {}  # (chat, message id) → the page's receipt
        self._board: BoardView | None = None

    def http_routes(self) -> Sequence[Any]:
        return [web.get("/", self._serve_page), web.get("/ws", self._serve_socket),
                web.get("/board", self._serve_board), web.get(r"/board/{task_id:\d{1,18}}", self._serve_task)]

    def show_board(self, view: BoardView) -> None:
        self._board = view

    async def _start(self) -> None:
        """Nothing to connect: the page and socket are served by the gateway's HTTP server."""

    async def _stop(self) -> None:
        for sockets in list(self._sockets.values()):
            for ws in list(sockets):
                await ws.close(code=1001, message=b"gateway stopping")
        self._sockets.clear()

    # -- HTTP -----------------------------------------------------------------------------

    def entry_url(self, base_url: str) -> str | None:
        return entry_url(base_url, self.gate.token)

    def _refusal(self, request: web.Request, *, page: bool = False, token: str | None = None) -> web.Response | None:
        """Why a request may not reach the chat (None: it may). Another site's page (a cross-site
        websocket, DNS rebinding) and a missing or wrong token (`token`: the one the request carries
        elsewhere than in its address) are refused; the page without its token says how to get the link."""
        given = request.query.get("token", "") if token is None else token
        if not self.gate.host_allowed(request.host):
            return web.Response(status=421, text=f"This web chat is not served as {request.host!r}; to reach it "
                                "under that name, set http.public_url.\n")
        if not self.gate.origin_allowed(request.headers.get("Origin"), request.host):
            return web.Response(status=403, text="Pages of other sites may not use this web chat.\n")
        if not self.gate.token_ok(given):
            if page:
                return locked_page()
            where = "?token=… in the address" if token is None else f"its token in the {TOKEN_HEADER} header"
            return web.Response(status=401, text=f"This web chat needs {where}.\n")
        return None

    async def _serve_page(self, request: web.Request) -> web.StreamResponse:
        refusal = self._refusal(request, page=True)
        if refusal is not None:
            return refusal
        return chat_page()

    async def _serve_board(self, request: web.Request) -> web.Response:
        return await self._board_data(request, lambda board: board.tasks())

    async def _serve_task(self, request: web.Request) -> web.Response:
        task_id = int(request.match_info["task_id"])
        return await self._board_data(request, lambda board: board.events(task_id))

    async def _board_data(self, request: web.Request,
                          read: Callable[[BoardView], Awaitable[dict[str, Any] | None]]) -> web.Response:
        """What the page asks of the board, as JSON, past the chat's own checks; the token only in
        `TOKEN_HEADER` (a `<script src>` or `<img>` of another page cannot send one)."""
        refusal = self._refusal(request, token=header_token(request.headers.get(TOKEN_HEADER, "")))
        if refusal is not None:
            return refusal
        if self._board is None:
            return web.Response(status=404, text="This gateway has no task board to show.\n")
        try:
            data = await read(self._board)
        except Exception as exc:  # (its database is locked or failing: the page tries again)
            log.warning("web chat: the task board could not be read: %s", exc)
            return web.Response(status=503, text="The task board cannot be read right now.\n")
        if data is None:
            return web.Response(status=404, text="There is no such task.\n")
        return web.json_response(data, headers=DATA_HEADERS)

    async def _serve_socket(self, request: web.Request) -> web.StreamResponse:
        refusal = self._refusal(request)
        if refusal is not None:
            return refusal
        chat_id = request.query.get("chat", "")
        if not _CHAT_ID.match(chat_id):
            return web.Response(status=400, text="chat must be 8-64 letters, digits, '-' or '_'\n")
        if not self.running:
            return web.Response(status=503, text="starting\n")
        ws = web.WebSocketResponse(heartbeat=30.0, max_msg_size=frame_limit(self.max_chars))
        await ws.prepare(request)
        self._sockets.setdefault(chat_id, set()).add(ws)
        try:
            await ws.send_json({"type": "hello", "chat": chat_id, "title": "chatgate", "max_chars": self.max_chars})
            await self.emit(ChatOpened(self.name, chat_id))
            async for frame in ws:
                if frame.type != WSMsgType.TEXT:
                    continue
                await self._handle_frame(ws, chat_id, frame.data)
        finally:
            sockets = self._sockets.get(chat_id)
            if sockets is not None:
                sockets.discard(ws)
                if not sockets:
                    del self._sockets[chat_id]
        return ws

    async def _handle_frame(self, ws: web.WebSocketResponse, chat_id: str, data: str) -> None:
        try:
            frame = json.loads(data)
            if not isinstance(frame, dict):
                raise ValueError
        except ValueError:
            await ws.send_json({"type": "error", "text": "frames must be JSON objects"})
            return
        kind = frame.get("type")
        if kind == "message":
            await self._handle_message(ws, chat_id, frame)
        elif kind == "button":
            await self._handle_button(ws, chat_id, frame)
        elif kind == "received":
            waiting = self._acks.get((chat_id, str(frame.get("message_id"))))
            if waiting is not None and not waiting.done():
                waiting.set_result(None)
        else:
            await ws.send_json({"type": "error", "text": f"unknown frame type {kind!r}"})

    async def _handle_message(self, ws: web.WebSocketResponse, chat_id: str, frame: dict[str, Any]) -> None:
        text, msg_id = frame.get("text"), frame.get("id")
        if not isinstance(msg_id, str) or not 0 < len(msg_id) <= 128:
            await ws.send_json({"type": "error", "text": "a message needs an id (1-128 characters)"})
            return
        if not isinstance(text, str) or not text.strip():
            await ws.send_json({"type": "error", "text": "a message needs some text"})
            return
        if len(text) > self.max_chars:
            await ws.send_json({"type": "error", "text": f"This message is too long ({len(text):,} characters; the "
                                f"limit is {self.max_chars:,}). It was not sent."})
            await ws.send_json({"type": "ack", "id": msg_id, "duplicate": False, "rejected": True})
            return
        msg = InboundMessage(platform=self.name, chat_id=chat_id, chat_type="dm", user_id=self._user_id,
                             user_name=self._user_name, text=text, message_id=msg_id, bot_mentioned=True)
        async def waiting() -> None:  # no ack until stored: the page keeps showing it as sending
            await ws.send_json({"type": "notice", "level": "warning", "text": "Your message is not stored yet: "
                                "chatgate cannot write to its database right now. It is tried again."})

        intake = await self.emit_until_stored(msg, waiting=waiting)
        await ws.send_json({"type": "ack", "id": msg_id, "duplicate": intake is Intake.DUPLICATE,
                            "rejected": intake is Intake.REFUSED})

    async def _handle_button(self, ws: web.WebSocketResponse, chat_id: str, frame: dict[str, Any]) -> None:
        message_id, data = frame.get("message_id"), frame.get("data")
        if not isinstance(message_id, str) or not isinstance(data, str):
            await ws.send_json({"type": "error", "text": "a button press needs message_id and data"})
            return

        async def answer(text: str) -> None:
            if text:
                await ws.send_json({"type": "notice", "level": "info", "text": text})

        await self.emit(ButtonPress(platform=self.name, chat_id=chat_id, user_id=self._user_id,
                                    user_name=self._user_name, message_id=message_id, data=data, on_answer=answer))

    # -- output ---------------------------------------------------------------------------

    def reaches(self, chat_id: str) -> bool:
        return any(not ws.closed for ws in self._sockets.get(chat_id, ()))

    async def _broadcast(self, chat: ChatRef, frame: dict[str, Any]) -> None:
        sockets = [ws for ws in self._sockets.get(chat.chat_id, ()) if not ws.closed]
        if not sockets:
            raise ChatUnavailable(f"no open web chat tab for {chat.chat_id}")
        sent = 0
        for ws in sockets:
            try:
                await ws.send_json(frame)
                sent += 1
            except (ConnectionError, RuntimeError) as exc:
                log.debug("web chat socket write failed: %s", exc)
        if not sent:
            raise ChatUnavailable(f"web chat tab {chat.chat_id} went away")

    async def _deliver(self, chat: ChatRef, frame: dict[str, Any], final: bool) -> None:
        """Broadcast a frame; a final one counts only once the page confirms it."""
        if not final:
            await self._broadcast(chat, frame)
            return
        key = (chat.chat_id, frame["message_id"])
        receipt = self._acks.setdefault(key, asyncio.get_running_loop().create_future())
        try:
            await self._broadcast(chat, {**frame, "ack": True})
            async with asyncio.timeout(self.ack_timeout):
                await asyncio.shield(receipt)
        except TimeoutError:  # a tab that is slow rather than gone gets it again (same id) in a while
            raise ChatUnavailable(f"web chat tab {chat.chat_id} did not confirm the reply",
                                  retry_after=max(30.0, self.ack_timeout)) from None
        finally:
            if self._acks.get(key) is receipt:
                del self._acks[key]

    async def send(self, chat: ChatRef, reply: Reply) -> str:
        message_id = reply.key or "m" + secrets.token_hex(8)
        await self._deliver(chat, {"type": "message", "message_id": message_id, **_content(reply),
                                   "final": reply.final, "reply_to": reply.reply_to}, reply.final)
        return message_id

    async def edit(self, chat: ChatRef, message_id: str, reply: Reply) -> None:
        await self._deliver(chat, {"type": "edit", "message_id": message_id, **_content(reply),
                                   "final": reply.final}, reply.final)

    async def typing(self, chat: ChatRef, active: bool) -> None:
        try:
            await self._broadcast(chat, {"type": "typing", "active": active})
        except ChatUnavailable:
            pass

    async def activity(self, chat: ChatRef, text: str) -> None:
        """What the agent is doing ("running terminal: ls -la"): a muted line under the typing
        indicator, until the reply is final or typing stops. Nothing when no tab is open."""
        try:
            await self._broadcast(chat, {"type": "activity", "text": text})
        except ChatUnavailable:
            pass

    async def notice(self, chat: ChatRef, text: str, level: str = "warning") -> None:
        await self._broadcast(chat, {"type": "notice", "level": level, "text": text})
