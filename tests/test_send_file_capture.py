"""`send_file` takes a copy when the tool runs, and only that copy is sent.

An agent that sends `report.csv` and then swaps it for a link to chatgate's own database or config
(`rm report.csv && ln -s $CHATGATE_HOME/state.db report.csv`, harmless to the classifier and allowed
in the sandbox) must not get those bytes into the chat; nor may a hard link to the database, or an
approved outside path swapped after the approval. Opening the database as a plain file would also
drop the daemon's own SQLite locks, so it is refused before it is opened.
"""

from __future__ import annotations

import os
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.llm import FakeLLM, Reply
from tests.fakes.telegram import FakeTelegram
from tests.harness import ANN, Tab, eventually, start_gateway, telegram_gateway, wait_for_text

OUTGOING = "outgoing"  # $CHATGATE_HOME/outgoing: the copies
REPORT = b"a,b\n1,2\n"
CONFIG = "gateway:\n  tick_seconds: 60  # TOPSECRET-config-line\n"


def tool_results(llm: FakeLLM) -> list[str]:
    """Each tool result the model was given, once (a request repeats the ones before it)."""
    return list(dict.fromkeys(m["content"] for r in llm.requests for m in r["messages"] if m["role"] == "tool"))


def integrity(home: Path) -> str:
    with sqlite3.connect(home / "state.db") as db:
        return db.execute("PRAGMA integrity_check").fetchone()[0]


def copies(home: Path) -> list[Path]:
    return [p for p in (home / OUTGOING).rglob("*") if not p.is_dir()] if (home / OUTGOING).exists() else []


def outbox_states(home: Path) -> list[str]:
    with sqlite3.connect(home / "state.db") as db:
        return [r[0] for r in db.execute("SELECT state FROM outbox ORDER BY id")]


def setup(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "report.csv").write_bytes(REPORT)
    (tmp_path / "config.yaml").write_text(CONFIG)
    return ws


@pytest.mark.parametrize("own", ["state.db", "state.db-wal", "config.yaml"])
async def test_a_file_swapped_for_a_link_after_send_file_goes_out_as_it_was(tmp_path, llm: FakeLLM,
                                                                            tg: FakeTelegram, own: str):
    ws = setup(tmp_path)
    stale = tmp_path / OUTGOING / "earlier-turn" / "1" / "old.csv"  # left by a run long ago
    stale.parent.mkdir(parents=True)
    stale.write_text("old")
    os.utime(stale, (time.time() - 30 * 86400,) * 2)
    llm.script(Reply.tool_calls([("send_file", {"path": "report.csv"})]),
               Reply.tool_calls([("terminal", {"command": f"rm report.csv && ln -s {tmp_path / own} report.csv"})]),
               Reply.text("Here is the report."), Reply.text("Still here."))
    runner = await telegram_gateway(tmp_path, llm, tg, agent__workspace=ws)
    try:
        tg.user_message("send me the report")
        [upload] = await tg.wait_for("sendDocument", lambda c: c.status == 200, timeout=20)
        assert os.readlink(ws / "report.csv") == str(tmp_path / own)  # the swap did happen, before delivery
        assert "exit code 0" in tool_results(llm)[1]
        sent = upload.files["document"]
        assert (sent.filename, sent.content) == ("report.csv", REPORT)
        assert not sent.content.startswith(b"SQLite format 3") and b"TOPSECRET" not in sent.content
        await eventually(lambda: outbox_states(tmp_path) == ["sent"], what="the reply and its file sent")
        await eventually(lambda: copies(tmp_path) == [], what="the copy removed once sent")
        assert integrity(tmp_path) == "ok"
        tg.user_message("are you still there?")
        await wait_for_text(tg, "Still here.")
        assert integrity(tmp_path) == "ok"
    finally:
        await runner.stop()


async def test_a_hard_link_to_the_database_in_the_workspace_is_refused(tmp_path, llm: FakeLLM):
    ws = setup(tmp_path)
    llm.script(Reply.tool_calls([("send_file", {"path": "db.bin"})]), Reply.text("I could not send it."),
               Reply.text("Still here."))
    runner = await start_gateway(tmp_path, llm.base_url, agent__workspace=ws)
    try:
        os.link(tmp_path / "state.db", ws / "db.bin")  # (planted by an earlier command, say)
        async with Tab(runner) as tab:
            await tab.say("send me db.bin")
            assert await tab.reply(1) == "I could not send it."
            await eventually(lambda: outbox_states(tmp_path) == ["sent"], what="the reply sent")
            assert tab.replies() == ["I could not send it."]  # no 📎 after it
            [result] = tool_results(llm)
            assert result.startswith("error:") and "chatgate's own files" in result
            assert copies(tmp_path) == []
            await tab.say("and now?")
            assert await tab.reply(2) == "Still here."
        assert integrity(tmp_path) == "ok"
    finally:
        await runner.stop()


async def test_read_and_patch_file_never_open_the_database_through_a_hard_link(tmp_path, llm: FakeLLM):
    """Opening and closing the database as a plain file drops the daemon's SQLite locks: read_file and
    patch_file refuse it under any name, as send_file does."""
    ws = setup(tmp_path)
    llm.script(Reply.tool_calls([("read_file", {"path": "db.bin"})]),
               Reply.tool_calls([("patch_file", {"path": "db.bin", "old": "SQLite", "new": "sqlite"})]),
               Reply.text("Neither worked."), Reply.text("Still here."))
    runner = await start_gateway(tmp_path, llm.base_url, agent__workspace=ws)
    try:
        os.link(tmp_path / "state.db", ws / "db.bin")
        async with Tab(runner) as tab:
            await tab.say("look at db.bin")
            assert await tab.reply(1) == "Neither worked."
            read, patch = [m["content"] for m in llm.requests[2]["messages"] if m["role"] == "tool"]
            assert read.startswith("error:") and "chatgate's own files" in read
            assert patch.startswith("error:") and "chatgate's own files" in patch
            await tab.say("and now?")
            assert await tab.reply(2) == "Still here."
        assert integrity(tmp_path) == "ok"
    finally:
        await runner.stop()


async def test_the_copies_of_a_stopped_turn_are_removed(tmp_path, llm: FakeLLM):
    ws = setup(tmp_path)
    llm.script(Reply.tool_calls([("send_file", {"path": "report.csv"})]),
               Reply.tool_calls([("terminal", {"command": "sleep 30"})]), Reply.text("Still here."))
    runner = await start_gateway(tmp_path, llm.base_url, agent__workspace=ws)
    try:
        async with Tab(runner) as tab:
            await tab.say("send me the report, slowly")
            await eventually(lambda: len(llm.requests) == 2, what="send_file done and the next step asked for")
            assert len(copies(tmp_path)) == 1
            await tab.say("/stop")
            await eventually(lambda: copies(tmp_path) == [], what="the stopped turn's copy removed")
            await tab.say("and now?")
            await tab.wait_for(lambda f: f["type"] in ("message", "edit") and f.get("final")
                               and f["text"] == "Still here.")
            assert not any("📎" in r for r in tab.replies())
    finally:
        await runner.stop()


def _approve_prompt(tg: FakeTelegram) -> Any:
    prompt = next(m for m in tg.sent_messages(ANN) if m.reply_markup)
    data = next(b["callback_data"] for row in prompt.reply_markup["inline_keyboard"] for b in row
                if b["text"] == "Allow once")
    tg.callback_query(data, message_id=prompt.message_id)


async def test_an_approved_outside_file_is_taken_right_after_the_approval(tmp_path, llm: FakeLLM,
                                                                         tg: FakeTelegram):
    ws = setup(tmp_path)
    outside = tmp_path / "elsewhere" / "notes.txt"
    outside.parent.mkdir()
    outside.write_text("the notes\n")

    def respond(body: dict[str, Any]) -> Reply | None:
        last = body["messages"][-1]
        if last["role"] == "tool":  # approved and taken: now the path is swapped for the database
            outside.unlink()
            outside.symlink_to(tmp_path / "state.db")
            return Reply.text("Sent.")
        return Reply.tool_calls([("send_file", {"path": str(outside)})])

    llm.responder = respond
    runner = await telegram_gateway(tmp_path, llm, tg, agent__workspace=ws)
    try:
        tg.user_message("send me the notes")
        await tg.wait_for("sendMessage", lambda c: bool(c.get("reply_markup")), timeout=10)
        _approve_prompt(tg)
        [upload] = await tg.wait_for("sendDocument", lambda c: c.status == 200, timeout=10)
        assert (upload.files["document"].filename, upload.files["document"].content) == ("notes.txt", b"the notes\n")
        assert outside.is_symlink()
    finally:
        await runner.stop()


async def test_an_approved_path_to_the_database_itself_is_still_refused(tmp_path, llm: FakeLLM, tg: FakeTelegram):
    ws = setup(tmp_path)
    llm.script(Reply.tool_calls([("send_file", {"path": str(tmp_path / "state.db")})]), Reply.text("Refused."))
    runner = await telegram_gateway(tmp_path, llm, tg, agent__workspace=ws)
    try:
        tg.user_message("send me your database")
        await tg.wait_for("sendMessage", lambda c: bool(c.get("reply_markup")), timeout=10)
        _approve_prompt(tg)
        await wait_for_text(tg, "Refused.")
        await eventually(lambda: outbox_states(tmp_path)[-1:] == ["sent"], what="the reply sent")
        assert tg.calls_to("sendDocument") == []
        assert "chatgate's own files" in tool_results(llm)[0]
        assert integrity(tmp_path) == "ok"
    finally:
        await runner.stop()
