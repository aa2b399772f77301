"""A small driver for Debian's headless Chromium over the DevTools protocol, with aiohttp only.

    async with Browser() as browser:
        await browser.navigate("http://127.0.0.1:8080/")
        await browser.insert_text("hello")
        await browser.press_enter()
        await browser.wait_for("document.querySelector('.msg.bot')")

One browser process per `Browser`, with a throwaway profile; leaving the `async with` kills the
browser (its whole process group) and removes the profile, whatever happened inside. Uncaught
page exceptions are collected in `errors`, and JavaScript dialogs (`alert`, ...) are dismissed
at once and recorded in `dialogs`, so a test can assert that neither happened.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import json
import os
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import aiohttp

FLAGS = (
    "--headless=new",
    "--no-sandbox",  # needed when running as root (CI containers)
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-extensions",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-default-apps",
    "--disable-sync",
    "--no-first-run",
    "--no-default-browser-check",
    "--mute-audio",
    "--remote-debugging-port=0",
)


class BrowserError(RuntimeError):
    """The browser could not be started or did not do what was asked."""


class Browser:
    def __init__(self, executable: str = "chromium", start_timeout: float = 30.0,
                 command_timeout: float = 30.0) -> None:
        self.executable = executable
        self.start_timeout = start_timeout
        self.command_timeout = command_timeout
        self.errors: list[str] = []  # uncaught exceptions in the page
        self.dialogs: list[str] = []  # alert/confirm/prompt messages (dismissed)
        self._dir: Path | None = None
        self._proc: asyncio.subprocess.Process | None = None
        self._http: aiohttp.ClientSession | None = None
        self._ws: aiohttp.ClientWebSocketResponse | None = None
        self._reader: asyncio.Task[None] | None = None
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._expected: list[tuple[str, asyncio.Future[dict[str, Any]]]] = []
        self._tasks: set[asyncio.Task[Any]] = set()

    # -- life cycle -----------------------------------------------------------------------

    async def __aenter__(self) -> "Browser":
        try:
            await self._launch()
        except BaseException:
            await self.close()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _launch(self) -> None:
        exe = shutil.which(self.executable)
        if exe is None:
            raise BrowserError(f"{self.executable!r} is not installed; the web chat browser tests need Debian's "
                               "Chromium: apt-get install chromium")
        self._dir = Path(tempfile.mkdtemp(prefix="chatgate-chromium-"))
        profile = self._dir / "profile"
        with open(self._dir / "chromium.log", "wb") as log:
            self._proc = await asyncio.create_subprocess_exec(
                exe, *FLAGS, f"--user-data-dir={profile}", "about:blank", stdin=subprocess.DEVNULL,
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)  # its own group, killed as one
        port = await self._devtools_port(profile / "DevToolsActivePort")
        self._http = aiohttp.ClientSession()
        async with self._http.get(f"http://127.0.0.1:{port}/json/list") as response:
            targets = await response.json()
        pages = [t for t in targets if t.get("type") == "page" and t.get("webSocketDebuggerUrl")]
        if not pages:
            raise BrowserError(f"chromium has no page to drive: {targets}")
        self._ws = await self._http.ws_connect(pages[0]["webSocketDebuggerUrl"], max_msg_size=0)
        self._reader = asyncio.create_task(self._read(), name="chromium-devtools")
        await self.send("Page.enable")
        await self.send("Runtime.enable")

    async def _devtools_port(self, path: Path) -> int:
        """The port Chromium chose, from the file it writes once it listens."""
        assert self._proc is not None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.start_timeout
        while True:
            with contextlib.suppress(OSError, ValueError, IndexError):
                return int(path.read_text().split("\n")[0])
            if self._proc.returncode is not None:
                raise BrowserError(f"chromium exited with {self._proc.returncode} before it listened:\n{self._log()}")
            if loop.time() > deadline:
                raise BrowserError(f"chromium did not write {path.name} within {self.start_timeout}s:\n{self._log()}")
            await asyncio.sleep(0.05)

    @staticmethod
    async def _group_gone(group: int, timeout: float = 5.0) -> None:
        """Wait (a little) until no process of the killed group is left, before its profile goes."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while loop.time() < deadline:
            try:
                os.killpg(group, 0)
            except (ProcessLookupError, PermissionError):
                return
            await asyncio.sleep(0.02)

    def _log(self) -> str:
        assert self._dir is not None
        with contextlib.suppress(OSError):
            return (self._dir / "chromium.log").read_text(errors="replace")[-3000:]
        return ""

    async def close(self) -> None:
        if self._ws is not None:
            with contextlib.suppress(Exception):
                await self._ws.close()
        if self._reader is not None:
            self._reader.cancel()
            await asyncio.gather(self._reader, return_exceptions=True)
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._http is not None:
            await self._http.close()
        if self._proc is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self._proc.pid, signal.SIGKILL)  # the browser and every helper process it started
            await self._proc.wait()
            await self._group_gone(self._proc.pid)
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
        self._ws = self._reader = self._http = self._proc = self._dir = None

    # -- the protocol ---------------------------------------------------------------------

    async def _read(self) -> None:
        assert self._ws is not None
        try:
            async for frame in self._ws:
                if frame.type != aiohttp.WSMsgType.TEXT:
                    continue
                message = json.loads(frame.data)
                if "id" in message:
                    waiting = self._pending.pop(message["id"], None)
                    if waiting is None or waiting.done():
                        continue
                    if "error" in message:
                        waiting.set_exception(BrowserError(f"DevTools error: {message['error']}"))
                    else:
                        waiting.set_result(message.get("result", {}))
                else:
                    self._event(message.get("method", ""), message.get("params", {}))
        finally:
            for waiting in self._pending.values():
                if not waiting.done():
                    waiting.set_exception(BrowserError("the connection to chromium closed"))
            self._pending.clear()

    def _event(self, method: str, params: dict[str, Any]) -> None:
        if method == "Runtime.exceptionThrown":
            details = params.get("exceptionDetails", {})
            self.errors.append(details.get("exception", {}).get("description") or details.get("text", "?"))
        elif method == "Page.javascriptDialogOpening":
            self.dialogs.append(str(params.get("message", "")))
            task = asyncio.create_task(self.send("Page.handleJavaScriptDialog", accept=False))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        for expected in [e for e in self._expected if e[0] == method]:
            self._expected.remove(expected)
            if not expected[1].done():
                expected[1].set_result(params)

    def _expect(self, method: str) -> asyncio.Future[dict[str, Any]]:
        """A future for the next `method` event (register before causing it)."""
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._expected.append((method, future))
        return future

    async def send(self, method: str, **params: Any) -> dict[str, Any]:
        """One DevTools command; returns its result."""
        if self._ws is None:
            raise BrowserError("the browser is not running")
        ident = next(self._ids)
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[ident] = future
        await self._ws.send_json({"id": ident, "method": method, "params": params})
        try:
            return await asyncio.wait_for(future, self.command_timeout)
        except TimeoutError:
            raise BrowserError(f"chromium did not answer {method} within {self.command_timeout}s") from None
        finally:
            self._pending.pop(ident, None)

    # -- what a test does -----------------------------------------------------------------

    async def navigate(self, url: str, timeout: float = 15.0) -> None:
        """Open `url` and wait for its load event."""
        loaded = self._expect("Page.loadEventFired")
        result = await self.send("Page.navigate", url=url)
        if result.get("errorText"):
            raise BrowserError(f"could not open {url}: {result['errorText']}")
        try:
            await asyncio.wait_for(loaded, timeout)
        except TimeoutError:
            raise BrowserError(f"{url} did not finish loading within {timeout}s") from None

    async def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (promises awaited), as JSON data."""
        result = await self.send("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            details = result["exceptionDetails"]
            why = details.get("exception", {}).get("description") or details.get("text", "?")
            raise BrowserError(f"JavaScript failed: {why}\nin: {expression[:300]}")
        return result.get("result", {}).get("value")

    async def wait_for(self, expression: str, timeout: float = 10.0) -> Any:
        """Poll `expression` until it is truthy (in JavaScript's sense: an element counts); returns
        its value."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            truthy, value = await self.evaluate(f"Promise.resolve((\n{expression}\n)).then((v) => [!!v, v])")
            if truthy:
                return value
            if loop.time() > deadline:
                page = await self.evaluate("document.body ? document.body.innerText.slice(-1500) : ''")
                raise AssertionError(f"not true within {timeout}s: {expression}\nlast value: {value!r}\n"
                                     f"page text (end):\n{page}")
            await asyncio.sleep(0.05)

    async def insert_text(self, text: str) -> None:
        """Type `text` into the focused element (as an input method would: one input event)."""
        await self.send("Input.insertText", text=text)

    async def press_enter(self) -> None:
        keys = {"key": "Enter", "code": "Enter", "windowsVirtualKeyCode": 13, "nativeVirtualKeyCode": 13}
        await self.send("Input.dispatchKeyEvent", type="keyDown", text="\r", unmodifiedText="\r", **keys)
        await self.send("Input.dispatchKeyEvent", type="keyUp", **keys)

    async def click(self, selector: str, text: str | None = None) -> None:
        """Click the first element matching `selector` (and, if given, whose text is `text`) with
        the mouse, in its middle, after scrolling it into view; fails when something covers it."""
        found = await self.evaluate(f"""(() => {{
            const text = {json.dumps(text)};
            const el = Array.from(document.querySelectorAll({json.dumps(selector)}))
                .find((e) => text === null || e.textContent.trim() === text);
            if (!el) return null;
            el.scrollIntoView({{block: "center", inline: "center"}});
            const r = el.getBoundingClientRect(), x = r.left + r.width / 2, y = r.top + r.height / 2;
            const hit = document.elementFromPoint(x, y);
            return {{x, y, visible: r.width > 0 && r.height > 0, hit: !!hit && (hit === el || el.contains(hit)),
                     disabled: !!el.disabled}};
        }})()""")
        what = selector + (f" with text {text!r}" if text is not None else "")
        if found is None:
            raise BrowserError(f"nothing to click: no {what}")
        if not found["visible"] or not found["hit"]:
            raise BrowserError(f"cannot click {what}: it is hidden or covered ({found})")
        if found["disabled"]:
            raise BrowserError(f"cannot click {what}: it is disabled")
        point = {"x": found["x"], "y": found["y"]}
        await self.send("Input.dispatchMouseEvent", type="mouseMoved", **point)
        await self.send("Input.dispatchMouseEvent", type="mousePressed", button="left", clickCount=1, **point)
        await self.send("Input.dispatchMouseEvent", type="mouseReleased", button="left", clickCount=1, **point)

    async def set_viewport(self, width: int, height: int, *, mobile: bool = False, scale: float = 1.0) -> None:
        """Emulate a window of `width`×`height` CSS pixels (`mobile`: a phone's viewport rules)."""
        await self.send("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=scale,
                        mobile=mobile)

    async def screenshot(self, path: str | os.PathLike[str]) -> None:
        """A PNG of the visible page."""
        result = await self.send("Page.captureScreenshot", format="png")
        Path(path).write_bytes(base64.b64decode(result["data"]))
