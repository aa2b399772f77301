"""Attack review (issue 33, 2): "Allow for this session" survived a swap into chatgate's state.

The admin allowed a command outside the sandbox on a plain workspace folder for the session; the agent
then, inside the sandbox and unasked, replaced that folder with a link to CHATGATE_HOME, and the same
command ran again with no prompt and printed transcripts from state.db. Now the state check and the
snapshot come before any grant: a grant covers a command only while its words lead where they led when
it was shown, and a command that reaches chatgate's state asks each time, with no lasting yes offered.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.fakes.llm import FakeLLM, Reply
from tests.harness import Tab, is_prompt, press, start_gateway

CANARY = "transcript-canary-5521"  # said in the chat: it is in state.db (or its -wal) from then on
READ = "strings d/state.db d/state.db-wal"


def run(command: str, **extra: Any) -> Reply:
    return Reply.tool_calls([("terminal", {"command": command, **extra})])


def tool_results(llm: FakeLLM) -> list[str]:
    return [m["content"] for r in llm.requests for m in r["messages"] if m.get("role") == "tool"]


def labels(prompt: dict[str, Any]) -> list[str]:
    return [b["text"] for row in prompt["buttons"] for b in row]


def plain_folder(ws: Path) -> None:
    (ws / "d").mkdir(parents=True)
    for name in ("state.db", "state.db-wal"):
        (ws / "d" / name).write_text("just my notes\n")


@pytest.mark.parametrize("mode", ["off", "bwrap"])
async def test_a_session_grant_does_not_cover_the_command_after_its_folder_became_a_link_to_the_state(
        tmp_path: Path, llm: FakeLLM, mode: str):
    ws = tmp_path / "ws"
    plain_folder(ws)
    outside = {"outside_sandbox": True} if mode == "bwrap" else {}
    llm.script(run(READ, **outside), Reply.text("read them"))
    runner = await start_gateway(tmp_path, llm.base_url, agent__workspace=ws, agent__sandbox__mode=mode,
                                 review__enabled="false")
    try:
        async with Tab(runner) as tab:
            await tab.say(f"my secret is {CANARY}; now read the notes in d")
            first = await tab.wait_for(is_prompt)
            assert "Allow for this session" in labels(first)
            await press(tab, first, "Allow for this session")
            assert await tab.reply(2) == "read them"
            assert "just my notes" in tool_results(llm)[-1]

            if mode == "bwrap":  # the agent swaps it itself, inside the sandbox, unasked
                llm.script(run(f"mv d d.old && ln -s {tmp_path} d"), Reply.text("tidied"))
                await tab.say("tidy up")
                assert await tab.reply(3) == "tidied"
                assert len([f for f in tab.frames if is_prompt(f)]) == 1
            else:  # no sandbox: every command asks here, so the swap is made on disk (a real link)
                (ws / "d").rename(ws / "d.old")
                (ws / "d").symlink_to(tmp_path)
            assert (ws / "d").resolve() == tmp_path.resolve()

            llm.script(run(READ, **outside), Reply.text("asked again"))
            await tab.say("read the notes in d again")
            again = await tab.wait_for(is_prompt, count=2)  # the grant does not cover it any more
            assert "chatgate's own state" in again["text"] and "Asked each time" in again["text"]
            assert labels(again) == ["Allow once", "Deny"]  # no lasting yes for the state
            await press(tab, again, "Deny")
            assert await tab.reply(4 if mode == "off" else 5) == "asked again"
        results = tool_results(llm)
        assert "NOT run" in results[-1]
        assert not any(CANARY in r for r in results), results
    finally:
        await runner.stop()


async def test_a_prompt_for_the_state_refuses_a_lasting_yes_pressed_anyway(tmp_path: Path, llm: FakeLLM):
    """A button the prompt does not show, sent by hand: refused, and the request still waits."""
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "d").symlink_to(tmp_path)
    llm.script(run(READ), Reply.text("done"))
    runner = await start_gateway(tmp_path, llm.base_url, agent__workspace=ws, agent__sandbox__mode="off",
                                 review__enabled="false")
    try:
        async with Tab(runner) as tab:
            await tab.say(f"remember {CANARY}, then read d")
            prompt = await tab.wait_for(is_prompt)
            approval_id = prompt["buttons"][0][0]["data"].split(":")[1]
            for choice in ("s", "a"):
                await tab.send_raw({"type": "button", "message_id": prompt["message_id"],
                                    "data": f"ap:{approval_id}:{choice}"})
            await press(tab, prompt, "Deny")
            assert await tab.reply(2) == "done"
        rows = await runner.parts.store.fetch("SELECT state, subject_hash FROM approvals")
        assert [r["state"] for r in rows] == ["denied"]
        events = await runner.parts.store.fetch("SELECT event, detail FROM approval_events WHERE event = 'refused_press'")
        assert [e["detail"] for e in events] == ["asked each time", "asked each time"]
        assert not await runner.parts.store.fetch("SELECT 1 FROM approval_rules")
        assert not any(CANARY in r for r in tool_results(llm))
    finally:
        await runner.stop()


async def test_an_always_rule_outlives_a_change_of_the_file_but_not_its_becoming_a_link(tmp_path: Path,
                                                                                      llm: FakeLLM):
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "notes.txt").write_text("first notes\n")
    elsewhere = tmp_path / "elsewhere.txt"  # not chatgate's state: a file outside the workspace
    elsewhere.write_text("someone else's file\n")
    read = run("cat notes.txt", outside_sandbox=True)
    llm.script(read, Reply.text("one"))
    runner = await start_gateway(tmp_path, llm.base_url, agent__workspace=ws, agent__sandbox__mode="bwrap",
                                 review__enabled="false")
    try:
        async with Tab(runner) as tab:
            await tab.say("read my notes outside")
            await press(tab, await tab.wait_for(is_prompt), "Always allow")
            assert await tab.reply(2) == "one"
            (ws / "notes.txt").write_text("second notes, longer than the first\n")
            llm.script(read, Reply.text("two"))
            await tab.say("and again")
            assert await tab.reply(3) == "two"  # what it names changed: still covered
            assert "second notes" in tool_results(llm)[-1]
            (ws / "notes.txt").unlink()
            (ws / "notes.txt").symlink_to(elsewhere)
            llm.script(read, Reply.text("three"))
            await tab.say("and once more")
            again = await tab.wait_for(is_prompt, count=2)  # it leads elsewhere now: asked again
            assert "cat notes.txt" in again["text"]
            await press(tab, again, "Deny")
            assert await tab.reply(5) == "three"
        assert "NOT run" in tool_results(llm)[-1]
        assert not any("someone else's" in r for r in tool_results(llm))
    finally:
        await runner.stop()
