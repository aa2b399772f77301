"""What a person's "Allow for this session" / "Always allow" covers: the command, and where it runs.

A grant made for a command inside the sandbox never lets the same command run outside it
(`outside_sandbox=true`, or no sandbox at all): a new prompt asks, and says where it will run.
A grant for an unconfined run also covers the sandboxed one. Rules written before confinement was
recorded keep covering sandboxed runs only; those whose prompt had said the command ran unconfined
also asked no more outside it, until rules were bound to where a command's paths lead (migration 018):
such a rule now asks once more outside the sandbox.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path
from typing import Any

from gateway import cli
from gateway.approvals import subject_hash
from tests.fakes.llm import FakeLLM, Reply
from tests.harness import Tab, gateway_env, is_prompt, press, start_gateway


def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    (ws / "victim").mkdir(parents=True, exist_ok=True)
    return ws


def run(command: str, **extra: Any) -> Reply:
    return Reply.tool_calls([("terminal", {"command": command, **extra})])


def tool_results(llm: FakeLLM) -> list[str]:
    return [m["content"] for m in llm.requests[-1]["messages"] if m["role"] == "tool"]


async def sandboxed_gateway(tmp_path: Path, llm: FakeLLM):
    runner = await start_gateway(tmp_path, llm.base_url, agent__workspace=workspace(tmp_path),
                                 agent__sandbox__mode="bwrap", review__enabled="false")
    assert runner.parts.sandbox.active
    return runner


def prompts(tab: Tab) -> list[dict[str, Any]]:
    return [f for f in tab.frames if is_prompt(f)]


async def test_a_session_grant_in_the_sandbox_does_not_cover_the_same_command_outside(tmp_path, llm: FakeLLM):
    llm.script(run("rm -rf victim"), Reply.text("removed inside"))
    runner = await sandboxed_gateway(tmp_path, llm)
    try:
        async with Tab(runner) as tab:
            await tab.say("delete victim")
            inside = await tab.wait_for(is_prompt)
            await press(tab, inside, "Allow for this session")
            assert await tab.reply(2) == "removed inside"
            (tmp_path / "ws" / "victim").mkdir()

            llm.script(run("rm -rf victim", outside_sandbox=True), Reply.text("not removed outside"))
            await tab.say("now the same outside the sandbox")
            outside = await tab.wait_for(is_prompt, count=2)  # asked again: the grant was for the sandbox
            assert "Where it runs: inside the sandbox" in inside["text"]  # each prompt says where
            assert "Where it runs: **outside any sandbox**" in outside["text"]
            assert "<strong>outside any sandbox</strong>" in outside["html"]
            await press(tab, outside, "Deny")
            assert await tab.reply(4) == "not removed outside"
            assert "NOT run" in tool_results(llm)[-1]
            assert (tmp_path / "ws" / "victim").exists()

            llm.script(run("rm -rf victim"), Reply.text("removed inside again"))  # inside: still granted
            await tab.say("inside once more")
            assert await tab.reply(5) == "removed inside again"
            assert len(prompts(tab)) == 2
        assert not (tmp_path / "ws" / "victim").exists()
        rows = await runner.parts.store.fetch("SELECT confinement, state FROM approvals ORDER BY created_at")
        assert [(r["confinement"], r["state"]) for r in rows] == [("sandbox", "session"), ("unconfined", "denied")]
    finally:
        await runner.stop()


async def test_a_grant_to_run_unconfined_also_covers_the_sandbox(tmp_path, llm: FakeLLM):
    llm.script(run("rm -rf victim", outside_sandbox=True), Reply.text("removed outside"))
    runner = await sandboxed_gateway(tmp_path, llm)
    try:
        async with Tab(runner) as tab:
            await tab.say("delete victim outside")
            await press(tab, await tab.wait_for(is_prompt), "Allow for this session")
            assert await tab.reply(2) == "removed outside"
            (tmp_path / "ws" / "victim").mkdir()
            llm.script(run("rm -rf victim"), Reply.text("removed inside"))
            await tab.say("and inside")
            assert await tab.reply(3) == "removed inside"
            assert len(prompts(tab)) == 1
        assert not (tmp_path / "ws" / "victim").exists()
    finally:
        await runner.stop()


async def test_an_always_rule_made_in_the_sandbox_asks_again_outside_and_the_listing_says_where(
        tmp_path, llm: FakeLLM, monkeypatch, capsys):
    llm.script(run("rm -rf victim"), Reply.text("removed"))
    runner = await sandboxed_gateway(tmp_path, llm)
    try:
        async with Tab(runner) as tab:
            await tab.say("delete victim")
            await press(tab, await tab.wait_for(is_prompt), "Always allow")
            assert await tab.reply(2) == "removed"
            (tmp_path / "ws" / "victim").mkdir()
            llm.script(run("rm -rf victim", outside_sandbox=True), Reply.text("refused"))
            await tab.say("/new")
            await tab.reply(3)
            await tab.say("delete it outside")
            await press(tab, await tab.wait_for(is_prompt, count=2), "Deny")
            assert await tab.reply(5) == "refused"
        assert (tmp_path / "ws" / "victim").exists()
        for key, value in gateway_env(tmp_path, None).items():
            monkeypatch.setenv(key, value)
        capsys.readouterr()
        assert await asyncio.to_thread(cli.main, ["approvals", "rules", "list"]) == 0
        [line] = capsys.readouterr().out.splitlines()
        assert "in the sandbox" in line and line.endswith("rm -rf victim")
    finally:
        await runner.stop()


# -- rules from before confinement was recorded ----------------------------------------------


OUTSIDE = "runs OUTSIDE the sandbox: with chatgate's own access to files, secrets and the network"


def old_database(home: Path, rules: list[tuple[str, list[str]]]) -> None:
    """A state.db as the release before this change left it (migrations up to 012), with one
    "always allow" rule per (command, the reasons its prompt showed), each made from its request."""
    folder = Path(__file__).parent.parent / "gateway" / "storage" / "migrations"
    home.mkdir(parents=True, exist_ok=True)
    with sqlite3.connect(home / "state.db") as db:
        for path in sorted(folder.glob("*.sql")):
            if int(path.name.split("_", 1)[0]) <= 12:
                db.executescript(path.read_text())
        db.execute("PRAGMA user_version = 12")
        for n, (command, reasons) in enumerate(rules):
            when, digest = 1_700_000_000.5 + n, subject_hash("command", command)
            db.execute("INSERT INTO approvals (id, session_key, platform, chat_id, requester_id, kind, subject,"
                       " subject_hash, reasons, state, decided_by, decided_at, created_at, expires_at) VALUES"
                       " (?, 'k', 'webchat', 'c', 'local', 'command', ?, ?, ?, 'always', 'you', ?, ?, ?)",
                       (f"old{n}", command, digest, json.dumps(reasons), when, when - 5, when + 300))
            db.execute("INSERT INTO approval_rules (kind, subject, subject_hash, scope, created_by, created_at)"
                       " VALUES ('command', ?, ?, 'global', 'you', ?)", (command, digest, when))


async def test_old_rules_cover_only_the_sandbox_unless_their_prompt_said_outside(tmp_path, llm: FakeLLM):
    """An old rule to run a command unconfined cannot say where its paths led when it was made (018): it
    covers the command in the sandbox and, outside it, asks once more; the new rule covers it again."""
    old_database(tmp_path, [("rm -rf victim", ["recursive delete: rm -rf victim"]),
                            ("rm -rf other", [OUTSIDE, "recursive delete: rm -rf other"])])
    (tmp_path / "ws" / "other").mkdir(parents=True)
    llm.script(run("rm -rf victim"), Reply.text("inside: no question"))
    runner = await sandboxed_gateway(tmp_path, llm)
    try:
        rules = await runner.parts.store.fetch("SELECT subject, confinement FROM approval_rules ORDER BY id")
        assert [(r["subject"], r["confinement"]) for r in rules] == [("rm -rf victim", "sandbox"),
                                                                     ("rm -rf other", "unconfined")]
        async with Tab(runner) as tab:
            await tab.say("delete victim")
            assert await tab.reply() == "inside: no question"
            (tmp_path / "ws" / "victim").mkdir()
            llm.script(run("rm -rf victim", outside_sandbox=True), Reply.text("asked"))
            await tab.say("delete victim outside")
            await press(tab, await tab.wait_for(is_prompt), "Deny")
            assert await tab.reply(3) == "asked"
            llm.script(run("rm -rf other"), Reply.text("other inside: no question"))
            await tab.say("delete other inside")
            assert await tab.reply(4) == "other inside: no question"
            (tmp_path / "ws" / "other").mkdir()
            llm.script(run("rm -rf other", outside_sandbox=True), Reply.text("outside: asked once more"))
            await tab.say("delete other outside")
            await press(tab, await tab.wait_for(is_prompt, count=2), "Always allow")
            assert await tab.reply(6) == "outside: asked once more"
            (tmp_path / "ws" / "other").mkdir()
            llm.script(run("rm -rf other", outside_sandbox=True), Reply.text("outside: no question"))
            await tab.say("delete other outside again")
            assert await tab.reply(7) == "outside: no question"
            assert len(prompts(tab)) == 2
        assert (tmp_path / "ws" / "victim").exists() and not (tmp_path / "ws" / "other").exists()
    finally:
        await runner.stop()
