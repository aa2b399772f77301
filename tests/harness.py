"""Helpers for end-to-end tests: a gateway configured the way a user would, and a browser tab."""

from __future__ import annotations

import asyncio
import os
import secrets
import shutil
import signal
import socket
import sqlite3
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
import subprocess
import sys
from pathlib import Path
from typing import Any, AsyncIterator, Callable

import aiohttp

from agent.tools import ApprovalOutcome, ApprovalRequest, ToolContext
from gateway.config import load_config
from gateway.runner import GatewayRunner
from platforms.base import InboundMessage
from tests.fakes.llm import FakeLLM, Reply
from tests.fakes.telegram import DEFAULT_GROUP_ID, FakeTelegram


STORAGE_URL: str | None = None  # a PostgreSQL database for the test's gateways (conftest: CHATGATE_TEST_STORAGE)


def gateway_env(home: Path, llm_url: str | None, **settings: Any) -> dict[str, str]:
    """Environment for a gateway on a free port; extra settings as section__key=value."""
    env = {**({"CHATGATE_STORAGE__URL": STORAGE_URL} if STORAGE_URL else {}),"CHATGATE_HOME": str(home), "CHATGATE_HTTP__PORT": "0", "CHATGATE_GATEWAY__DRAIN_SECONDS": "2",
           "CHATGATE_REVIEW__AFTER_PAUSE_SECONDS": "0"}  # (reviews at once; tested with a pause on its own)
    if llm_url:
        env.update({"CHATGATE_LLM__BASE_URL": llm_url, "CHATGATE_LLM__API_KEY": "test-key",
                    "CHATGATE_LLM__MAX_RETRIES": "2"})
    for name, value in settings.items():
        env["CHATGATE_" + name.upper()] = str(value)
    return env


async def start_gateway(home: Path, llm_url: str | None, **settings: Any) -> GatewayRunner:
    runner = GatewayRunner(load_config(env=gateway_env(home, llm_url, **settings)))
    try:
        await runner.start()
    except BaseException:
        await runner.stop()  # what `chatgate run` does after a failed start: close what was opened
        raise
    return runner


class Approver:
    """An ApprovalPort for tool tests: records each request, answers as told."""

    def __init__(self, approved: bool) -> None:
        self.approved = approved
        self.requests: list[ApprovalRequest] = []

    async def request(self, ctx: ToolContext, request: ApprovalRequest) -> ApprovalOutcome:
        self.requests.append(request)
        return ApprovalOutcome(self.approved, "once" if self.approved else "denied",
                               "Approved once." if self.approved else "Denied.")


def delete_then_report(body: dict[str, Any]) -> Reply | None:
    """An LLM responder: asked to "delete it", it runs a command that needs approval, then says "done"."""
    messages = body["messages"]
    if "delete it" not in str(messages[-1].get("content")) and messages[-1]["role"] != "tool":
        return None
    if messages[-1]["role"] == "tool":
        return Reply.text("done")
    return Reply.tool_calls([("terminal", {"command": "rm -rf victim"})])


class Tab:
    """One web chat tab: a websocket that records every frame the gateway sends."""

    def __init__(self, runner: GatewayRunner | None, chat_id: str | None = None, *, confirm: bool = True,
                 url: str = "", token: str | None = None) -> None:
        """`confirm`: answer `received` to replies that ask for it, as the page does (False: a tab
        whose socket is open but that never confirms, like one that died without closing). `runner`
        None: the gateway at `url` with `token` (a `chatgate run` in a subprocess)."""
        if runner is not None:
            assert runner.http is not None
            url = f"http://127.0.0.1:{runner.http.port}"
            token = runner.adapters["webchat"].gate.token  # type: ignore[attr-defined]
        self.confirm = confirm
        self.url, self.token = url, token
        self.chat_id = chat_id or "tab" + secrets.token_hex(6)
        self.frames: list[dict[str, Any]] = []
        self._changed = asyncio.Condition()
        self._http: aiohttp.ClientSession | None = None
        self._ws: aiohttp.ClientWebSocketResponse | None = None
        self._reader: asyncio.Task[None] | None = None

    async def __aenter__(self) -> "Tab":
        self._http = aiohttp.ClientSession()
        query = f"chat={self.chat_id}" + (f"&token={self.token}" if self.token else "")
        self._ws = await self._http.ws_connect(f"{self.url}/ws?{query}")
        self._reader = asyncio.create_task(self._read())
        await self.wait_for(lambda f: f["type"] == "hello")
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        if self._ws is not None:
            await self._ws.close()
        if self._reader is not None:
            await asyncio.gather(self._reader, return_exceptions=True)
        if self._http is not None:
            await self._http.close()

    async def _read(self) -> None:
        assert self._ws is not None
        async for frame in self._ws:
            if frame.type == aiohttp.WSMsgType.TEXT:
                data = frame.json()
                if self.confirm and data.get("ack"):
                    await self._ws.send_json({"type": "received", "message_id": data["message_id"]})
                async with self._changed:
                    self.frames.append(data)
                    self._changed.notify_all()

    async def send_raw(self, frame: dict[str, Any]) -> None:
        assert self._ws is not None
        await self._ws.send_json(frame)

    async def say(self, text: str, msg_id: str | None = None) -> dict[str, Any]:
        """Send a message and wait for the gateway's ack; returns the ack frame."""
        msg_id = msg_id or secrets.token_hex(6)

        def is_ack(f: dict[str, Any]) -> bool:
            return f["type"] == "ack" and f["id"] == msg_id

        earlier = sum(1 for f in self.frames if is_ack(f))
        await self.send_raw({"type": "message", "id": msg_id, "text": text})
        return await self.wait_for(is_ack, count=earlier + 1)

    async def wait_for(self, predicate: Callable[[dict[str, Any]], bool], timeout: float = 10.0,
                       count: int = 1) -> dict[str, Any]:
        """Wait until `count` recorded frames match; return the last match."""
        async def matched() -> list[dict[str, Any]]:
            async with self._changed:
                await self._changed.wait_for(lambda: sum(1 for f in self.frames if predicate(f)) >= count)
                return [f for f in self.frames if predicate(f)]
        try:
            return (await asyncio.wait_for(matched(), timeout))[count - 1]
        except TimeoutError:
            raise AssertionError(f"no frame matched within {timeout}s; frames: {self.frames[-12:]}") from None

    def replies(self) -> list[str]:
        """The text of every message as the person sees it now (after edits), final ones only."""
        return [text for text, final in bubbles(self.frames).values() if final]

    async def reply(self, n: int = 1, timeout: float = 10.0) -> str:
        """Wait for the n-th finished message in this tab and return its text as shown now."""
        async def enough() -> None:
            async with self._changed:
                await self._changed.wait_for(lambda: len(self.replies()) >= n)
        try:
            await asyncio.wait_for(enough(), timeout)
        except TimeoutError:
            raise AssertionError(f"only {len(self.replies())} of {n} replies within {timeout}s: "
                                 f"{self.replies()}; last frames: {self.frames[-8:]}") from None
        return self.replies()[n - 1]


# -- a real `chatgate run` ------------------------------------------------------------------


def bubbles(frames: list[dict[str, Any]]) -> dict[str, tuple[str, bool]]:
    """The bot's messages a page shows after these frames: id → (text now, final), in order (a frame
    for an id it shows already replaces it)."""
    shown: dict[str, tuple[str, bool]] = {}
    for f in frames:
        if f["type"] in ("message", "edit"):
            shown[f["message_id"]] = (f["text"], f["final"])
    return shown


def is_prompt(frame: dict[str, Any]) -> bool:
    """A web chat frame that is an approval prompt (a message with buttons)."""
    return frame["type"] == "message" and bool(frame.get("buttons"))


async def press(tab: Tab, prompt: dict[str, Any], label: str) -> None:
    """Press the button `label` under a prompt the tab received."""
    data = next(b["data"] for row in prompt["buttons"] for b in row if b["text"] == label)
    await tab.send_raw({"type": "button", "message_id": prompt["message_id"], "data": data})


def free_port() -> int:
    """A loopback port nothing listens on now (for a daemon whose address another process must know)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def web_message(n: int) -> InboundMessage:
    """The n-th of a series of one-line messages, each from its own web chat."""
    return InboundMessage(platform="web", chat_id=f"c{n}", chat_type="dm", user_id="u", text=str(n),
                          message_id=f"m{n}")


async def run_until_it_exits(env: dict[str, str]) -> tuple[int, list[str]]:
    """`chatgate run` with `env`, expected to stop by itself: its exit status and every line it printed."""
    process = await asyncio.create_subprocess_exec(sys.executable, "-m", "gateway", "run", env=env,
                                                   stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    try:
        out, _ = await asyncio.wait_for(process.communicate(), 60)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    return process.returncode or 0, out.decode().splitlines()


class Daemon:
    """`chatgate run` in a subprocess, on one CHATGATE_HOME, started and killed as often as needed."""

    def __init__(self, home: Path, llm: FakeLLM, settings: dict[str, Any], *, logs: Path | None = None) -> None:
        """`logs`: the folder of its output (`gateway-N.log`); the home by default."""
        self.home = home
        self.logs = logs or home
        self.env = {**os.environ, **gateway_env(home, llm.base_url, **settings)}
        self.process: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self) -> None:
        self.starts += 1
        log = open(self.logs / f"gateway-{self.starts}.log", "wb")  # noqa: SIM115 - the child owns it
        self.process = subprocess.Popen([sys.executable, "-m", "gateway", "run"], env=self.env,
                                        stdout=log, stderr=subprocess.STDOUT)
        log.close()

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        """`chatgate <args>` beside it, on the same home and settings."""
        return subprocess.run([sys.executable, "-m", "gateway", *args], capture_output=True, text=True,
                              env=self.env, timeout=60)

    def kill(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(10)

    async def terminate(self) -> int:
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)
        return await asyncio.to_thread(self.process.wait, 30)

    def close(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)

    def rows(self, sql: str, *args: Any) -> list[Any]:
        return state_rows(self.home, sql, *args)


def state_rows(home: Path, sql: str, *args: Any) -> list[Any]:
    """The rows of `sql` (SQLite's text, `?` arguments) in the state of the gateway on `home`: its SQLite file,
    or the test's PostgreSQL database (`STORAGE_URL`); none before the schema exists. Read in a thread of
    its own, so it works from a test's event loop too (the gateway may be a process killed meanwhile)."""
    if STORAGE_URL is not None:
        with ThreadPoolExecutor(1) as thread:
            return thread.submit(asyncio.run, _postgres_rows(STORAGE_URL, sql, args)).result()
    path = home / "state.db"
    if not path.exists():
        return []
    with sqlite3.connect(path) as db:
        db.row_factory = sqlite3.Row
        try:
            return db.execute(sql, args).fetchall()
        except sqlite3.OperationalError as error:
            if "no such table" in str(error):  # not migrated yet
                return []
            raise


async def _postgres_rows(url: str, sql: str, args: tuple[Any, ...]) -> list[Any]:
    import asyncpg

    from gateway.storage.postgres_engine import numbered

    db = await asyncpg.connect(url)
    try:
        return list(await db.fetch(numbered(sql), *args))
    except asyncpg.UndefinedTableError:  # not migrated yet
        return []
    finally:
        await db.close()


# -- another program on the database ------------------------------------------------------


class Shell:
    """The `sqlite3` command-line shell on the database, inside `BEGIN IMMEDIATE` until released; taken on
    entering, or (`locked=False`) when `lock` is called."""

    def __init__(self, path: Path, *, locked: bool = True) -> None:
        self.path = path
        self.locked = locked
        self.process: asyncio.subprocess.Process | None = None

    async def __aenter__(self) -> "Shell":
        if self.locked:
            await self.lock()
        return self

    async def lock(self) -> None:
        assert shutil.which("sqlite3"), "the sqlite3 shell is needed (apt-get install sqlite3)"
        self.process = await asyncio.create_subprocess_exec(  # -bail: a BEGIN that failed ends it
            "sqlite3", "-bail", str(self.path), stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL)
        await self._say(".timeout 10000\nBEGIN IMMEDIATE;\nSELECT 'locked';\n")  # (waits for a write to end)
        assert self.process.stdout is not None
        assert await asyncio.wait_for(self.process.stdout.readline(), 15) == b"locked\n"

    async def _say(self, text: str) -> None:
        assert self.process is not None and self.process.stdin is not None
        self.process.stdin.write(text.encode())
        await self.process.stdin.drain()

    async def release(self) -> None:
        if self.process is not None and self.process.returncode is None:
            await self._say("ROLLBACK;\n.quit\n")
            await asyncio.wait_for(self.process.wait(), 10)

    async def __aexit__(self, *exc: object) -> None:
        if self.process is not None and self.process.returncode is None:
            self.process.kill()
            await self.process.wait()


# -- Telegram -------------------------------------------------------------------------------

ANN = 1001


def telegram_settings(tg: FakeTelegram, **more: Any) -> dict[str, Any]:
    return {"platforms__telegram__token": tg.token, "platforms__telegram__base_url": tg.url,
            "platforms__telegram__poll_timeout": 1, "access__allowed_users": f"{{telegram: [{ANN}]}}", **more}


async def telegram_gateway(home: Path, llm: FakeLLM, tg: FakeTelegram, **more: Any) -> GatewayRunner:
    return await start_gateway(home, llm.base_url, **telegram_settings(tg, **more))


def sent_texts(tg: FakeTelegram, chat_id: int) -> list[str]:
    return [m.text or "" for m in tg.sent_messages(chat_id)]


async def wait_for_text(tg: FakeTelegram, text: str, timeout: float = 8.0) -> None:
    """Wait until some message the bot sent (after edits) reads `text`."""
    async with tg._cond:  # notified on every call the fake answers
        try:
            await asyncio.wait_for(tg._cond.wait_for(lambda: any(m.text == text for m in tg.sent_messages())),
                                   timeout)
        except TimeoutError:
            raise AssertionError(f"no message reads {text!r}; sent: {[m.text for m in tg.sent_messages()]}") \
                from None


async def each_answered_once(tg: FakeTelegram, daemon: Daemon, answers: dict[int, str]) -> None:
    """Wait until each chat shows its answer; then that is the one message the bot has in it, and every
    reply is recorded as sent, once."""
    for text in answers.values():
        await wait_for_text(tg, text, timeout=40)
    for chat, text in answers.items():
        assert sent_texts(tg, chat) == [text], chat
    await eventually(lambda: [r["state"] for r in daemon.rows("SELECT state FROM outbox")] == ["sent"] * len(answers),
                     timeout=20, what="every reply recorded as sent once")


async def eventually(check: Callable[[], Any], timeout: float = 8.0, what: str = "the condition") -> None:
    """Wait until `check()` (sync or async) is true, looking every 20 ms: for state that has no event to
    wait on, such as a database row another process writes."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        result = check()
        if asyncio.iscoroutine(result):
            result = await result
        if result:
            return
        if loop.time() > deadline:
            raise AssertionError(f"{what} did not hold within {timeout}s")
        await asyncio.sleep(0.02)


# -- shared groups ---------------------------------------------------------------------------

BOB = 1002  # beside Ann: an allowed user, not an admin
GROUP = DEFAULT_GROUP_ID


def shared_group(tg: FakeTelegram, **more: Any) -> dict[str, Any]:
    """Ann is an admin, Bob an allowed user; the group is one shared session."""
    return telegram_settings(tg, access__allowed_users=f"{{telegram: [{ANN}, {BOB}]}}",
                             access__admins=f"{{telegram: [{ANN}]}}", gateway__group_sessions="shared",
                             review__enabled="false", **more)


def bob_says(tg: FakeTelegram, text: str) -> None:
    tg.user_message(text, chat_type="group", user_id=BOB, first_name="Bob", username="bob")


async def prompt_in(tg: FakeTelegram, chat: int, count: int = 1) -> Any:
    """The `count`-th approval prompt with buttons the bot sent to `chat`."""
    calls = await tg.wait_for("sendMessage", lambda c: bool(c.get("reply_markup")) and c.get("chat_id") == str(chat),
                              count=count, timeout=10)
    message_id = int(calls[count - 1].result["message_id"])
    return next(m for m in tg.sent_messages(chat) if m.message_id == message_id)


def buttons(prompt: Any) -> dict[str, str]:
    """The buttons under a Telegram message: label → callback data."""
    return {b["text"]: b["callback_data"] for row in prompt.reply_markup["inline_keyboard"] for b in row}



def step_results(body: dict[str, Any]) -> str:
    """The results of the request's latest tool step, each as `name: result`, in call order."""
    results: list[str] = []
    for m in reversed(body["messages"]):
        if m["role"] != "tool":
            break
        results.insert(0, f"{m['name']}: {m['content']}")
    return " | ".join(results)


async def chat_text(tg: FakeTelegram, chat_id: int, start: str, timeout: float = 10.0) -> str:
    """Wait until a message the bot sent to `chat_id` reads (after edits) `start`…; return it."""
    def found() -> list[str]:
        return [m.text for m in tg.sent_messages(chat_id) if m.text and m.text.startswith(start)]

    await tg.wait_until(lambda: bool(found()), timeout, lambda: f"a message starting {start!r}: "
                        f"{[m.text for m in tg.sent_messages(chat_id)]}")
    return found()[0]


@asynccontextmanager
async def home_documents(home: Path) -> AsyncIterator[Any]:
    """The memory and skills (agent.documents) of the gateway on `home`, as its CLI opens them: files in the home,
    or the documents table of the test's PostgreSQL database (`STORAGE_URL`)."""
    from gateway.learning.documents import documents_of
    from gateway.storage import Store

    store = await Store.open(home / "state.db", url=STORAGE_URL)
    try:
        yield documents_of(store, home)
    finally:
        await store.close()
