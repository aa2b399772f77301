"""`chatgate board …` and the board's line in `chatgate status`, run as the operator runs them (`python -m gateway`
in a process of its own) on a home of the test's, on SQLite and on PostgreSQL (`storage.url`). A task is blocked
the way the dispatcher blocks one: through the BoardStore, from the test."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any, AsyncIterator

import pytest

from gateway.storage import Store
from tests.pg import fresh_database


class Home:
    """A CHATGATE_HOME (and, on PostgreSQL, the database `storage.url` names) the CLI runs on."""

    def __init__(self, path: Path, url: str | None) -> None:
        self.path, self.url = path, url
        kept = {k: v for k, v in os.environ.items() if not k.startswith(("CHATGATE_", "OPENAI_"))}
        self.env = {**kept, "CHATGATE_HOME": str(path), **({"CHATGATE_STORAGE__URL": url} if url else {})}

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run([sys.executable, "-m", "gateway", *args], capture_output=True, text=True, env=self.env,
                              timeout=60, stdin=subprocess.DEVNULL)
        assert "Traceback" not in done.stderr, done.stderr
        return done

    def json(self, *args: str) -> Any:
        """`chatgate ARGS --json`, which succeeds and prints exactly one JSON value."""
        done = self.run(*args, "--json")
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    def refused(self, *args: str, status: int = 1) -> str:
        """`chatgate ARGS`, refused: its one line on stderr (nothing on stdout)."""
        done = self.run(*args)
        assert done.returncode == status and done.stdout == "", done.stdout + done.stderr
        if status == 1:
            assert done.stderr.count("\n") == 1, done.stderr
        return done.stderr

    async def store(self) -> Store:
        return await Store.open(self.path / "state.db", url=self.url)


@pytest.fixture
async def home(engine: str, tmp_path: Path) -> AsyncIterator[Home]:
    """A home on each engine. The CLI never migrates a PostgreSQL database (instances may run on it): a daemon of
    this version did, here the test's Store."""
    async with AsyncExitStack() as stack:
        url = await stack.enter_async_context(fresh_database()) if engine == "postgres" else None
        place = Home(tmp_path / "home", url)
        if url:
            await (await place.store()).close()
        yield place


@pytest.fixture
def sqlite_home(tmp_path: Path) -> Home:
    return Home(tmp_path / "home", None)


async def test_add_with_parents_target_and_priority_then_list_and_show(home: Home):
    first = home.json("board", "add", "collect the invoices", "--to", "telegram:100:7", "--priority", "5")
    assert {k: first[k] for k in ("id", "title", "status", "owner", "origin", "parents", "created_by", "attempts",
                                  "priority", "result", "question")} == {
        "id": 1, "title": "collect the invoices", "status": "ready", "owner": "operator", "origin": "telegram:100:7",
        "parents": [], "created_by": None, "attempts": 0, "priority": 5, "result": None, "question": None}
    second = home.json("board", "add", "sum them up", "--body", "in euros", "--after", "1", "--after", "#1")
    assert (second["status"], second["parents"], second["body"], second["origin"]) == ("todo", [1], "in euros", None)
    low = home.json("board", "add", "tidy up", "--priority", "-1", "--to", "none")
    assert (low["status"], low["origin"]) == ("ready", None)

    assert [t["id"] for t in home.json("board", "list")] == [1, 2, 3]  # (highest priority first, then oldest)
    assert [t["title"] for t in home.json("board", "list", "--status", "todo")] == ["sum them up"]
    assert home.json("board", "list", "--status", "blocked") == []
    table = home.run("board", "list").stdout.splitlines()
    assert table[0].split() == ["ID", "STATUS", "PRI", "OWNER", "TITLE"]
    assert table[2].split() == ["2", "todo", "0", "operator", "sum", "them", "up", "(after", "1)"]
    assert home.run("board", "list", "--status", "done").stdout == "no done tasks\n"

    assert "commented on task 2 (todo)" in home.run("board", "comment", "2", "use last month's rate").stdout
    shown = home.json("board", "show", "2")
    assert {k: v for k, v in shown.items() if k != "events"} == home.json("board", "list", "--status", "todo")[0]
    assert [(e["kind"], e["author"], e["text"]) for e in shown["events"]] == [
        ("added", "operator", "sum them up"), ("comment", "operator", "use last month's rate")]
    text = home.run("board", "show", "2").stdout
    assert text.startswith("task 2: sum them up\n") and "  after:    1 (ready)\n" in text
    assert "  body:\n    in euros\n" in text and "operator: use last month's rate" in text
    assert "reports to telegram:100:7" in home.run("board", "show", "1").stdout


async def test_an_answer_is_refused_until_the_task_is_blocked_then_it_is_ready_again(home: Home):
    task = home.json("board", "add", "paint the fence")
    assert home.refused("board", "answer", "1", "blue") == (
        "chatgate board: task 1 is ready: it is not blocked: there is nothing to answer\n")
    store = await home.store()
    try:
        await store.board.claim("test-instance", 1)
        await store.board.block(task["id"], "test-instance", "red or blue?", None, None)
    finally:
        await store.close()
    assert home.json("board", "list", "--status", "blocked")[0]["question"] == "red or blue?"
    assert "  question:\n    red or blue?\n" in home.run("board", "show", "1").stdout
    assert "paint the fence — asks: red or blue?" in home.run("board", "list").stdout

    answered = home.json("board", "answer", "1", "blue")
    assert (answered["status"], answered["question"], answered["attempts"]) == ("ready", None, 1)
    events = home.json("board", "show", "1")["events"]
    assert [(e["kind"], e["author"]) for e in events] == [
        ("added", "operator"), ("started", "test-instance"), ("blocked", "test-instance"), ("comment", "operator"),
        ("answered", "operator")]
    assert events[3]["text"] == "blue"
    assert home.refused("board", "answer", "1", "green").startswith("chatgate board: task 1 is ready")


async def test_cancel_archives_and_every_refusal_is_one_line_and_a_non_zero_exit(sqlite_home: Home):
    home = sqlite_home
    home.json("board", "add", "one")
    cancelled = home.run("board", "cancel", "1")
    assert cancelled.returncode == 0 and cancelled.stdout == "cancelled task 1: one (archived)\n"
    assert home.json("board", "show", "1")["status"] == "archived"
    assert [e["kind"] for e in home.json("board", "show", "1")["events"]] == ["added", "cancelled"]
    for args, says in [
            (("cancel", "1"), "task 1 is archived: it cannot be cancelled"),
            (("add", "two", "--after", "1"), "task 1 was cancelled: it cannot come first"),
            (("add", "two", "--after", "99"), "task 99 does not exist: it cannot come first"),
            (("add", "two", "--to", "telegram"), "--to: delivery target 'telegram' must be platform:chat, "
                                                 "platform:chat:thread or none"),
            (("add", "two", "--to", "telegram::7"), "--to: delivery target"),
            (("add", " "), "a task needs a title"),
            (("comment", "1", "  "), "an empty comment says nothing"),
            (("show", "99"), "there is no task 99"),
            (("answer", "99", "yes"), "there is no task 99"),
            (("comment", "99", "hm"), "there is no task 99"),
            (("cancel", "99"), "there is no task 99")]:
        assert home.refused("board", *args).startswith(f"chatgate board: {says}"), args
        with_json = home.run("board", *args, "--json")  # (the refusal stays on stderr: stdout holds no JSON)
        assert with_json.returncode == 1 and with_json.stdout == "" and says in with_json.stderr
    for args in [("show", "one"), ("show", "0"), ("show", "99999999999999999999"), ("list", "--status", "lost"),
                 ("add", "two", "--priority", "high"), ("add", "two", "--priority", "100000"), ("answer", "1")]:
        assert "usage: chatgate board" in home.refused("board", *args, status=2), args
    assert [t["title"] for t in home.json("board", "list")] == ["one"]  # (nothing refused was added)


async def test_what_a_task_holds_cannot_drive_the_terminal_and_json_keeps_it_exactly(sqlite_home: Home):
    """A title, a comment or a result may come from a chat or from the model: escape sequences and carriage
    returns are taken out of what is printed, and --json gives the text back as it was."""
    home = sqlite_home
    title = "fine\x1b[2J\x1b]0;owned\x07\rFAKE LINE\u202e"
    store = await home.store()  # (an old task's: a title added now, by a chat or the CLI, is one printable line)
    try:
        await store.board.add(title)
    finally:
        await store.close()
    assert home.json("board", "show", "1")["title"] == title
    home.run("board", "comment", "1", "two\nlines\x1b[31m red")
    for args in (("list",), ("show", "1"), ("add", "x\x1b[1A", "--after", "1")):
        printed = home.run("board", *args).stdout
        assert not any(c in printed for c in "\x1b\x07\r\u202e"), (args, printed)
    assert "fine [2J ]0;owned FAKE LINE" in home.run("board", "list").stdout
    assert home.json("board", "show", "1")["events"][1]["text"] == "two\nlines\x1b[31m red"


async def test_without_a_daemon_a_change_says_the_task_waits_and_json_stays_one_value(sqlite_home: Home):
    home = sqlite_home
    added = home.run("board", "add", "later")
    assert added.stdout == ("added task 1: later (ready)\n"
                            "note: the gateway is not running; the task waits until it starts\n")
    with_json = home.run("board", "add", "later too", "--json")
    assert json.loads(with_json.stdout)["id"] == 2 and "the gateway is not running" in with_json.stderr


async def test_status_counts_the_tasks_by_status(home: Home):
    home.run("board", "list")  # (the home's database made)
    empty = home.run("status")
    assert empty.returncode == 3 and "task board" not in empty.stdout
    assert json.loads(home.run("status", "--json").stdout)["board"] == {
        "todo": 0, "ready": 0, "running": 0, "blocked": 0, "done": 0, "archived": 0}
    for args in (("add", "a"), ("add", "b", "--after", "1"), ("add", "c"), ("add", "d"), ("cancel", "4")):
        home.run("board", *args)
    store = await home.store()
    try:
        await store.board.block(3, None, "which one?", None, None, author="test")
    finally:
        await store.close()
    assert ("task board: 1 todo, 1 ready, 1 blocked, 1 archived (the blocked wait for an answer: chatgate board "
            "list --status blocked)\n") in home.run("status").stdout
    assert json.loads(home.run("status", "--json").stdout)["board"] == {
        "todo": 1, "ready": 1, "running": 0, "blocked": 1, "done": 0, "archived": 1}


def test_the_parser_offers_the_statuses_the_board_has():
    from gateway.cli.parsers.board import STATUSES as OFFERED
    from gateway.storage.board import STATUSES

    assert OFFERED == STATUSES
