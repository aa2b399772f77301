"""The web chat page in a real headless Chromium, served by a real gateway, with the fake LLM.

Every wait is on a condition in the page (`Browser.wait_for`) or on recorded state (the store,
the fake LLM's requests), never on a fixed sleep.
"""

from __future__ import annotations

import json
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, AsyncIterator

from gateway.runner import GatewayRunner
from platforms.base import ChatRef
from platforms.base import Reply as OutReply
from tests.browser import Browser
from tests.fakes.llm import FakeLLM, Reply
from tests.harness import delete_then_report, eventually, start_gateway

BOT = "Array.from(document.querySelectorAll('#log .msg.bot'))"
USER = "Array.from(document.querySelectorAll('#log .msg.user'))"


def js(value: Any) -> str:
    return json.dumps(value)


@asynccontextmanager
async def chat_page(tmp_path: Path, llm: FakeLLM, *, phone: bool = False,
                    **settings: Any) -> AsyncIterator[tuple[GatewayRunner, Browser]]:
    """A gateway and a browser tab showing its web chat, connected; the page must not throw."""
    runner = await start_gateway(tmp_path, llm.base_url, **settings)
    try:
        assert runner.http is not None
        async with Browser() as browser:
            try:
                if phone:
                    await browser.set_viewport(390, 844, mobile=True, scale=3)
                await browser.navigate(runner.adapters["webchat"].entry_url(f"http://127.0.0.1:{runner.http.port}"))
                await browser.wait_for("document.getElementById('dot').className === 'online'")
                yield runner, browser
            except BaseException:
                await browser.screenshot(tmp_path / "failure.png")  # for whoever reads the failure
                raise
            assert browser.errors == [], browser.errors
            assert browser.dialogs == [], browser.dialogs
    finally:
        await runner.stop()


async def type_and_send(browser: Browser, text: str) -> None:
    """Type into the message box and press Enter, as a person does; wait until the gateway has it."""
    await browser.evaluate("document.getElementById('input').focus()")
    await browser.insert_text(text)
    await browser.press_enter()
    await browser.wait_for(f"{USER}.some((m) => m.querySelector('.bubble').textContent === {js(text)}"
                           " && !m.classList.contains('pending'))")  # acked: stored by the gateway


async def bot_reply(browser: Browser, containing: str) -> dict[str, Any]:
    """Wait for a finished bot message whose text contains `containing`; its text and HTML."""
    return await browser.wait_for(f"""(() => {{
        const m = {BOT}.find((m) => !m.classList.contains('streaming')
                                   && m.querySelector('.bubble').textContent.includes({js(containing)}));
        return m && {{text: m.querySelector('.bubble').textContent, html: m.querySelector('.bubble').innerHTML,
                     buttons: Array.from(m.querySelectorAll('.buttons button'), (b) => b.textContent)}};
    }})()""")


async def test_a_streamed_reply_is_shown_as_rendered_html_and_confirmed(tmp_path, llm: FakeLLM):
    llm.script(Reply.text("Hello **there**, and `code`!", chunk_size=6, chunk_delay=0.15))
    async with chat_page(tmp_path, llm) as (runner, browser):
        await browser.evaluate("""(() => {  // remember each state the bot's bubble goes through
            window.states = [];
            new MutationObserver(() => {
                const m = document.querySelector('#log .msg.bot');
                if (m) window.states.push({streaming: m.classList.contains('streaming'),
                                           html: m.querySelector('.bubble').innerHTML});
            }).observe(document.getElementById('log'), {subtree: true, childList: true, attributes: true});
        })()""")
        await type_and_send(browser, "say hello")
        reply = await bot_reply(browser, "Hello there")
        assert reply["html"] == "Hello <strong>there</strong>, and <code>code</code>!"
        assert reply["text"] == "Hello there, and code!"
        states = await browser.evaluate("window.states")
        assert any(s["streaming"] for s in states), states  # the preview grew in place before the final text
        assert not states[-1]["streaming"]
        assert await browser.evaluate(f"{BOT}.length") == 1  # the final reply replaced the preview

        async def confirmed() -> bool:
            assert runner.parts is not None
            row = await runner.parts.store.fetchrow("SELECT state FROM outbox ORDER BY id DESC LIMIT 1")
            return row is not None and row["state"] == "sent"
        await eventually(confirmed, what="the page's receipt for the reply")
        await browser.wait_for("document.getElementById('typing').hidden")  # the turn is over
        assert llm.requests[-1]["messages"][-1]["content"] == "say hello"


async def test_an_approval_is_decided_with_the_buttons(tmp_path, llm: FakeLLM):
    victim = tmp_path / "ws" / "victim"
    victim.mkdir(parents=True)
    llm.responder = delete_then_report
    async with chat_page(tmp_path, llm, agent__workspace=tmp_path / "ws") as (_, browser):
        await type_and_send(browser, "delete it")
        prompt = await bot_reply(browser, "Approval needed")
        assert prompt["buttons"] == ["Allow once", "Allow for this session", "Always allow", "Deny"]
        assert "<strong>Approval needed</strong>" in prompt["html"]
        assert "<pre><code>rm -rf victim</code></pre>" in prompt["html"]
        assert victim.exists()  # nothing runs before the decision

        # Press "Allow once" (a real click), then check in the same page task that every button of
        # the prompt is disabled: the outcome (an edit without buttons) cannot have arrived in between.
        pressed = await browser.evaluate(f"""(() => {{
            const m = {BOT}.find((m) => m.textContent.includes('Approval needed'));
            Array.from(m.querySelectorAll('.buttons button')).find((b) => b.textContent === 'Allow once').click();
            return Array.from(m.querySelectorAll('.buttons button'), (b) => [b.textContent, b.disabled]);
        }})()""")
        assert pressed and all(disabled for _, disabled in pressed), pressed

        outcome = await bot_reply(browser, "Allowed once by")
        assert "Approval needed" in outcome["text"] and outcome["buttons"] == []  # the prompt, edited in place
        assert (await bot_reply(browser, "done"))["text"] == "done"
        assert await browser.evaluate(f"{BOT}.length") == 2
        await browser.wait_for("document.getElementById('notice-text').textContent.includes('Allow once')")
        await eventually(lambda: not victim.exists(), what="the approved command to run")


async def test_new_chat_button_starts_a_new_session(tmp_path, llm: FakeLLM):
    async with chat_page(tmp_path, llm) as (_, browser):
        await type_and_send(browser, "remember pineapple")
        await bot_reply(browser, "echo: remember pineapple")
        await browser.click("#new-chat")
        await browser.wait_for(f"{USER}.some((m) => m.textContent === '/new')")
        reply = await bot_reply(browser, "new session")
        assert reply["text"] == "Started a new session. The previous conversation is saved and still searchable."

        await type_and_send(browser, "what did I say?")
        await bot_reply(browser, "echo: what did I say?")
        history = [m.get("content") for m in llm.requests[-1]["messages"]]
        assert "remember pineapple" not in history and history[-1] == "what did I say?"
        assert len(llm.requests) == 2  # /new is the gateway's, not the model's


async def test_the_page_fits_a_phone(tmp_path, llm: FakeLLM):
    (tmp_path / "ws").mkdir()
    long_line = "x = " + "+".join(f"value_{i}" for i in range(60))
    llm.script(Reply.text(f"A long answer:\n\n```python\n{long_line}\n```\n\n| name | value |\n|---|---|\n"
                          f"| {'w' * 80} | 1 |\n\nhttps://example.test/{'a' * 150}\n\n{'unbroken' * 30}"))
    llm.responder = delete_then_report
    async with chat_page(tmp_path, llm, phone=True, agent__workspace=tmp_path / "ws") as (_, browser):
        assert await browser.evaluate("innerWidth") == 390
        await type_and_send(browser, "show me something long")
        await bot_reply(browser, "A long answer")
        await type_and_send(browser, "delete it")
        await bot_reply(browser, "Approval needed")
        await browser.screenshot(tmp_path / "phone.png")

        fits = await browser.evaluate("""(() => {
            const inside = (el) => { const r = el.getBoundingClientRect();
                return r.width > 0 && r.left >= 0 && r.top >= 0 && r.right <= innerWidth && r.bottom <= innerHeight; };
            const main = document.getElementById('scroll');
            const buttons = Array.from(document.querySelectorAll('.buttons button'));
            return {
                page: document.documentElement.scrollWidth <= innerWidth,
                body: document.body.scrollWidth <= innerWidth,
                log: main.scrollWidth <= main.clientWidth,
                input: inside(document.getElementById('input')),
                send: inside(document.getElementById('send')),
                newChat: inside(document.getElementById('new-chat')),
                buttons: buttons.length === 4 && buttons.every((b) => { const r = b.getBoundingClientRect();
                    return r.left >= 0 && r.right <= innerWidth; }),
                rows: new Set(buttons.map((b) => Math.round(b.getBoundingClientRect().top))).size,
            };
        })()""")
        assert fits == {"page": True, "body": True, "log": True, "input": True, "send": True, "newChat": True,
                        "buttons": True, "rows": fits["rows"]}, fits
        assert fits["rows"] >= 2  # the four choices wrap onto rows
        await browser.click(".buttons button", text="Deny")
        await bot_reply(browser, "Denied by")


async def test_html_in_an_answer_is_shown_as_text(tmp_path, llm: FakeLLM):
    evil = ("look <img src=x onerror=alert(1)> and [x](javascript:alert(1)) and <script>window.pwned = 1</script> "
            "and <a href=\"javascript:alert(2)\">y</a>")
    llm.script(Reply.text(evil))
    async with chat_page(tmp_path, llm) as (runner, browser):
        await type_and_send(browser, "be evil")
        reply = await bot_reply(browser, "look")
        assert "<img src=x onerror=alert(1)>" in reply["text"] and "[x](javascript:alert(1))" in reply["text"]

        # The page does not trust the server's HTML blindly either: a frame with hostile markup.
        chat_id = await browser.evaluate("sessionStorage.getItem('chatgate.chat')")
        adapter = runner.adapters["webchat"]
        await adapter._broadcast(ChatRef("webchat", chat_id), {  # type: ignore[attr-defined]
            "type": "message", "message_id": "hostile", "final": True, "buttons": None, "text": "hostile frame",
            "html": "hostile <img src=x onerror=alert(3)><a href=' javascript:alert(4)'>z</a><b onclick=alert(5)>"
                    "b</b><a href=\"https://ok.test\" onclick=alert(6)>ok</a><svg><script>alert(7)</script></svg>"})
        await bot_reply(browser, "hostile")
        # A frame without HTML (another server version) shows its text as it is.
        await adapter._broadcast(ChatRef("webchat", chat_id), {  # type: ignore[attr-defined]
            "type": "message", "message_id": "plain", "final": True, "text": "plain **as is** <i>x</i>"})
        assert (await bot_reply(browser, "plain"))["html"] == "plain **as is** &lt;i&gt;x&lt;/i&gt;"

        found = await browser.evaluate("""({
            img: document.querySelectorAll('img, svg, #log i, script:not(body > script), iframe, object').length,
            js: Array.from(document.querySelectorAll('a')).filter((a) => /script:/i.test(a.getAttribute('href') || ''))
                .length,
            handlers: Array.from(document.querySelectorAll('#log *')).filter((e) => Array.from(e.attributes)
                .some((a) => a.name.startsWith('on'))).length,
            pwned: window.pwned === 1,
            ok: Array.from(document.querySelectorAll('#log a'), (a) => [a.getAttribute('href'), a.rel, a.target]),
        })""")
        assert found == {"img": 0, "js": 0, "handlers": 0, "pwned": False,
                         "ok": [["https://ok.test", "noopener noreferrer", "_blank"]]}, found


async def test_tool_activity_shows_while_the_turn_runs(tmp_path, llm: FakeLLM):
    async with chat_page(tmp_path, llm) as (runner, browser):
        chat = ChatRef("webchat", await browser.evaluate("sessionStorage.getItem('chatgate.chat')"))
        adapter = runner.adapters["webchat"]
        shown = ("(() => { const a = document.getElementById('activity');"
                 " return !a.hidden && a.getBoundingClientRect().height > 0 && a.textContent; })()")
        await adapter.typing(chat, True)
        await adapter.activity(chat, "running terminal: ls -la")
        assert await browser.wait_for(shown) == "running terminal: ls -la"
        await adapter.typing(chat, False)  # the turn ended
        await browser.wait_for("document.getElementById('activity').hidden")

        await adapter.activity(chat, "running read_file: notes.md")
        assert await browser.wait_for(shown) == "running read_file: notes.md"
        await adapter.send(chat, OutReply(text="the **answer**"))  # returns once the page confirmed it
        assert await browser.evaluate("document.getElementById('activity').hidden")
        assert (await bot_reply(browser, "the answer"))["html"] == "the <strong>answer</strong>"


async def test_without_its_token_the_page_is_styled_like_the_chat_and_names_the_command(tmp_path, llm: FakeLLM):
    look = "(() => { const b = getComputedStyle(document.body), h = getComputedStyle(document.querySelector('header'));" \
           " return [b.backgroundColor, b.fontFamily, h.backgroundColor, h.borderBottomColor]; })()"
    async with chat_page(tmp_path, llm) as (runner, browser):
        chat_look = await browser.evaluate(look)
        await browser.navigate(f"http://127.0.0.1:{runner.http.port}/?token=wrong")
        await browser.wait_for("document.querySelector('.bubble h2') !== null")
        assert await browser.evaluate(look) == chat_look
        shown = await browser.evaluate("document.body.innerText")
        assert "chatgate status" in shown and runner.adapters["webchat"].gate.token not in shown
        assert await browser.evaluate("getComputedStyle(document.querySelector('.bubble')).borderTopLeftRadius") \
            == "14px"  # the chat's bubble
