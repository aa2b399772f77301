"""The task board on the web chat's page: in a real headless Chromium (tasks added through the store appear in
their columns, move on their own, and show their events), and over HTTP: its data only for whoever may use the
chat (the token, in a header; this server's own names and pages), as JSON text a browser never runs."""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from gateway.ops.board_view import SHOWN, BoardView
from platforms.webchat.access import TOKEN_HEADER, Gate
from platforms.webchat.adapter import WebChatAdapter
from tests.board_model import BoardModel, board_call
from tests.fakes.llm import FakeLLM, Reply
from tests.harness import start_gateway
from tests.test_webchat_browser import chat_page

QUIET = {"review__enabled": "false"}
EVIL = "<img src=x onerror=alert(1)><script>window.pwned = 1</script>"


def in_column(status: str, task_id: int) -> str:
    """JavaScript: the title the page shows for `task_id` in the `status` column (null: not there)."""
    where = "#board-archived" if status == "archived" else f"#board .col[data-status={status}]"
    return f"document.querySelector('{where} details.task[data-id=\"{task_id}\"] .title')?.textContent ?? null"


def events_of(task_id: int) -> str:
    """JavaScript: the events the page shows under an opened task, as [kind, author, text]."""
    return (f"Array.from(document.querySelectorAll('details.task[data-id=\"{task_id}\"] .events li'), (li) =>"
            " [li.querySelector('.kind')?.textContent, li.querySelector('.author')?.textContent ?? null,"
            " li.querySelector('.text')?.textContent ?? null, !!li.querySelector('time').dateTime])")


async def test_tasks_appear_in_their_columns_move_on_their_own_and_show_their_events(tmp_path, llm: FakeLLM):
    model = BoardModel()
    llm.responder = model
    model.plans["ask first"] = lambda turn, text, body: (
        Reply.text("finished first") if "go on" in text else board_call(action="block", question="Which way?"))
    async with chat_page(tmp_path, llm, **QUIET) as (runner, browser):
        board = runner.parts.store.board
        await browser.click("#board-toggle")
        await browser.wait_for("!document.getElementById('board').hidden"
                               " && document.querySelectorAll('#board .col').length === 5")
        first = await board.add(f"ask first {EVIL}", "the description\non two lines")
        then = await board.add("then this", parents=[first.id])
        assert await browser.wait_for(in_column("todo", then.id)) == "then this"
        assert await browser.wait_for(in_column("blocked", first.id), timeout=20) == f"ask first {EVIL}"

        await browser.click(f"details.task[data-id=\"{first.id}\"] summary")
        shown = await browser.wait_for(f"(() => {{ const e = {events_of(first.id)}; "
                                       "return e.some((x) => x[0] === 'blocked') && e; })()")
        assert shown[0][:3] == ["added", "operator", f"ask first {EVIL}"], shown
        assert [e[0] for e in shown] == ["added", "started", "turn", "blocked"], shown
        assert shown[-1][2] == "Which way?" and shown[1][1] is not None  # (the run's instance started it)
        assert all(e[3] for e in shown)  # each with its time
        facts = await browser.evaluate(f"document.querySelector('details.task[data-id=\"{first.id}\"] .facts')"
                                       ".innerText")
        assert "the description\non two lines" in facts and "Waiting on: Which way?" in facts

        await board.answer(first.id, "operator", "go on")  # (the page is told nothing: it asks again on its own)
        assert await browser.wait_for(in_column("done", then.id), timeout=20) == "then this"
        assert await browser.wait_for(in_column("done", first.id)) == f"ask first {EVIL}"
        kinds = await browser.wait_for(f"(() => {{ const k = {events_of(first.id)}.map((e) => e[0]); "
                                       "return k.includes('done') && k; })()")  # still open, its events refreshed
        assert kinds.index("answered") < kinds.index("done")
        assert await browser.evaluate(f"document.querySelector('details.task[data-id=\"{first.id}\"]').open")

        dropped = await board.add("not needed")
        await board.cancel(dropped.id, "operator")
        await browser.wait_for("document.querySelector('#board-archived .count').textContent === '1'")
        assert not await browser.evaluate("document.getElementById('board-archived').open")  # folded away
        assert await browser.evaluate(in_column("archived", dropped.id)) == "not needed"

        injected = await browser.evaluate("""({
            elements: document.querySelectorAll('#board img, #board script, #board iframe, #board svg').length,
            handlers: Array.from(document.querySelectorAll('#board *')).filter((e) => Array.from(e.attributes)
                .some((a) => a.name.startsWith('on'))).length,
            pwned: window.pwned === 1,
        })""")
        assert injected == {"elements": 0, "handlers": 0, "pwned": False}, injected
        asked = await browser.evaluate("performance.getEntriesByType('resource').map((r) => r.name)"
                                       ".filter((name) => name.includes('/board'))")
        assert asked and not [a for a in asked if "token" in a], asked  # (the token went in a header)


# -- over HTTP --------------------------------------------------------------------------------------------------


async def fetch(url: str, **headers: str) -> tuple[int, dict[str, str], str]:
    async with aiohttp.ClientSession() as http, http.get(url, headers=headers) as response:
        return response.status, dict(response.headers), await response.text()


@pytest.fixture
async def served(tmp_path, llm: FakeLLM):
    """A gateway (its web chat also served as https://chat.example.org/) with one task; its base URL and token."""
    model = BoardModel()
    llm.responder = model
    model.plans["title"] = lambda turn, text, body: board_call(action="block", question="?")  # (one turn, then waits)
    runner = await start_gateway(tmp_path, llm.base_url, http__public_url="https://chat.example.org/", **QUIET)
    try:
        await runner.parts.store.board.add(f"title {EVIL}", f"body {EVIL}")
        yield runner, f"http://127.0.0.1:{runner.http.port}", runner.adapters["webchat"].gate.token
    finally:
        await runner.stop()


@pytest.mark.parametrize("path", ["/board", "/board/1"])
async def test_the_board_is_only_for_whoever_may_use_the_chat(served, path: str):
    runner, base, token = served
    ok = {TOKEN_HEADER: token}
    assert (await fetch(base + path))[0] == 401  # no token: another local program or user
    assert (await fetch(base + path, **{TOKEN_HEADER: token + "x"}))[0] == 401
    assert (await fetch(base + path, **{TOKEN_HEADER: "%ED%A0%80"}))[0] == 401  # (no UTF-8: a refusal, no error)
    assert (await fetch(f"{base}{path}?token={token}"))[0] == 401  # not in an address (logs, history, proxies)
    assert (await fetch(base + path, Origin="https://evil.example", **ok))[0] == 403  # another site's page
    assert (await fetch(base + path, Origin=f"http://localhost:{runner.http.port + 1}", **ok))[0] == 403
    assert (await fetch(base + path, Host=f"rebind.example:{runner.http.port}", **ok))[0] == 421  # DNS rebinding
    for allowed in ({}, {"Origin": base}, {"Host": "chat.example.org", "Origin": "https://chat.example.org"}):
        status, headers, _ = await fetch(base + path, **ok, **allowed)
        assert status == 200 and "Access-Control-Allow-Origin" not in headers, allowed
    async with aiohttp.ClientSession() as http:  # another site's preflight for the header is not granted
        async with http.options(base + path, headers={"Origin": "https://evil.example",
                                                      "Access-Control-Request-Method": "GET",
                                                      "Access-Control-Request-Headers": TOKEN_HEADER}) as preflight:
            assert preflight.status >= 400 and "Access-Control-Allow-Origin" not in preflight.headers


async def test_a_program_without_the_token_gets_nothing_of_the_board(served):
    _, base, token = served
    program = ("import sys, urllib.request, urllib.error\n"
               "try:\n    urllib.request.urlopen(sys.argv[1] + '/board', timeout=10)\n"
               "except urllib.error.HTTPError as e:\n    print(e.code, e.read().decode())\n")
    process = await asyncio.create_subprocess_exec(sys.executable, "-c", program, base,
                                                   stdout=asyncio.subprocess.PIPE)
    out, _ = await asyncio.wait_for(process.communicate(), 30)
    assert out.decode().startswith("401 ") and "title" not in out.decode() and token not in out.decode()


async def test_titles_bodies_and_events_come_as_json_text_never_as_a_page(served):
    _, base, token = served
    status, headers, text = await fetch(f"{base}/board", **{TOKEN_HEADER: token})
    assert status == 200 and headers["Content-Type"].startswith("application/json")
    assert headers["X-Content-Type-Options"] == "nosniff" and headers["Cache-Control"] == "no-store"
    assert headers["Content-Security-Policy"].startswith("default-src 'none'")
    assert headers["Cross-Origin-Resource-Policy"] == "same-origin"
    data = json.loads(text)
    assert set(data["counts"]) == {"todo", "ready", "running", "blocked", "done", "archived"}
    assert sum(data["counts"].values()) == 1
    [task] = [t for column in data["columns"].values() for t in column]
    assert (task["id"], task["title"], task["body"]) == (1, f"title {EVIL}", f"body {EVIL}")
    status, headers, text = await fetch(f"{base}/board/1", **{TOKEN_HEADER: token})
    assert status == 200 and headers["X-Content-Type-Options"] == "nosniff"
    added = json.loads(text)["events"][0]
    assert (added["kind"], added["author"], added["text"]) == ("added", "operator", f"title {EVIL}")


async def test_a_bad_task_number_is_a_clear_404(served):
    _, base, token = served
    for path in ("/board/999", "/board/abc", "/board/-1", "/board/" + "9" * 30, "/board/1/x"):
        status, _, text = await fetch(base + path, **{TOKEN_HEADER: token})
        assert status == 404 and "Traceback" not in text, path
    assert (await fetch(base + "/board/999", **{TOKEN_HEADER: token}))[2] == "There is no such task.\n"


# -- the adapter alone (a plain object for the gateway's board) -------------------------------------------------


class Failing:
    async def tasks(self) -> dict[str, Any]:
        raise OSError("database is locked")

    async def events(self, task_id: int) -> dict[str, Any] | None:
        return None


async def test_a_board_that_cannot_be_read_is_a_503_and_no_board_a_404():
    adapter = WebChatAdapter(gate=Gate("127.0.0.1", None, "t%k"))  # (a token a header carries percent-encoded)
    app = web.Application()
    app.add_routes(adapter.http_routes())
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    base, ok = f"http://127.0.0.1:{runner.addresses[0][1]}", {TOKEN_HEADER: "t%25k"}
    try:
        assert (await fetch(f"{base}/board", **ok))[:3:2] == (404, "This gateway has no task board to show.\n")
        adapter.show_board(Failing())
        assert (await fetch(f"{base}/board", **{TOKEN_HEADER: "t%2525k"}))[0] == 401  # (decoded once: "t%25k")
        assert (await fetch(f"{base}/board", **ok))[:3:2] == (503, "The task board cannot be read right now.\n")
        assert (await fetch(f"{base}/board/1", **ok))[0] == 404
    finally:
        await runner.cleanup()


# -- what the page is given -------------------------------------------------------------------------------------


async def test_each_column_is_bounded_latest_done_first_with_its_count(open_store):
    store = await open_store()
    board, view = store.board, BoardView(store.board)
    tasks = [await board.add(f"task {n}") for n in range(SHOWN + 3)]
    await board.claim("me", len(tasks))
    for task in tasks:
        await board.finish(task.id, "me", "x" * 5000, None)
    waiting = await board.add("waiting", "y" * 5000, priority=3)
    shown = await view.tasks()
    assert shown["counts"] == {"todo": 0, "ready": 1, "running": 0, "blocked": 0, "done": SHOWN + 3, "archived": 0}
    done = shown["columns"]["done"]
    assert len(done) == SHOWN and done[0]["id"] == tasks[-1].id  # the latest done first
    assert len(done[0]["result"]) == 2001 and done[0]["result"].endswith("…")
    [ready] = shown["columns"]["ready"]
    assert ready["title"] == "waiting" and len(ready["body"]) == 2001
    events = await view.events(waiting.id)
    assert events == {"task": waiting.id, "events": [{**events["events"][0], "kind": "added", "text": "waiting"}],
                      "earlier": 0}
    assert await view.events(10_000) is None
