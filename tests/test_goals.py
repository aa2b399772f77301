"""`/goal` end to end (web chat and Telegram, fake LLM): the agent works turn after turn, a judge
decides after each one, and the goal ends when the judge says so, at its turn limit, or when the
person stops it — and it carries on across a kill -9."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from agent.goal_judge import JUDGE_IDENTITY, read_verdict
from tests.fakes.llm import FakeLLM, Reply
from tests.fakes.telegram import FakeTelegram
from tests.harness import Daemon, Tab, start_gateway, telegram_settings, wait_for_text

QUIET = {"review__enabled": "false"}


def is_judge(body: dict[str, Any]) -> bool:
    return body["messages"][0]["content"] == JUDGE_IDENTITY


def is_goal_turn(body: dict[str, Any]) -> bool:
    return not is_judge(body) and str(body["messages"][-1].get("content", "")).startswith("[Goal")


def verdict(done: bool, reason: str) -> Reply:
    return Reply.text(json.dumps({"done": done, "reason": reason}))


class Judging:
    """A responder: the judge's requests get the scripted verdicts in order; other requests the echo."""

    def __init__(self, *verdicts: Reply) -> None:
        self.verdicts = list(verdicts)

    def __call__(self, body: dict[str, Any]) -> Reply | None:
        if is_judge(body):
            return self.verdicts.pop(0) if self.verdicts else verdict(False, "not yet")
        return None


async def shown(tab: Tab, start: str, timeout: float = 10.0) -> str:
    frame = await tab.wait_for(lambda f: f["type"] in ("message", "edit") and f.get("final")
                               and str(f["text"]).startswith(start), timeout=timeout)
    return str(frame["text"])


async def test_a_goal_the_judge_declares_done_on_the_third_turn_stops_there(tmp_path, llm: FakeLLM):
    llm.responder = Judging(verdict(False, "the tests are not written yet"), Reply.text("```json\n{\"done\": false,"
                            " \"reason\": \"one test still fails\"}\n```"), verdict(True, "all tests pass"))
    runner = await start_gateway(tmp_path, llm.base_url, **QUIET)
    try:
        async with Tab(runner) as tab:
            await tab.say("/goal write the tests for parser.py")
            assert "Goal set" in await shown(tab, "🎯")
            assert await shown(tab, "↻ Continuing (1/20)") == "↻ Continuing (1/20): the tests are not written yet"
            assert await shown(tab, "↻ Continuing (2/20)") == "↻ Continuing (2/20): one test still fails"
            assert await shown(tab, "✅") == "✅ Goal reached after 3 turn(s): all tests pass"
            await tab.say("/goal status")
            status = await shown(tab, "🎯 Goal: write the tests")
            assert "reached" in status and "turn 3 of 20" in status
        turns = [b for b in llm.requests if is_goal_turn(b)]
        judged = [b for b in llm.requests if is_judge(b)]
        assert len(turns) == 3 and len(judged) == 3  # it stopped at the judge's "done"
        assert "write the tests for parser.py" in turns[0]["messages"][-1]["content"]
        assert "one test still fails" in turns[2]["messages"][-1]["content"]  # the judge's note is passed on
        assert "tools" not in judged[0] and "echo: [Goal]" in judged[0]["messages"][1]["content"]
        loops = {r["loop"] for r in await runner.parts.store.fetch("SELECT DISTINCT loop FROM llm_usage")}
        assert {"goal", "judge"} <= loops
    finally:
        await runner.stop()


async def test_a_goal_that_never_finishes_stops_at_max_turns(tmp_path, llm: FakeLLM):
    llm.responder = Judging(Reply.text("I think it is fine"), verdict(False, "the report is missing"))
    runner = await start_gateway(tmp_path, llm.base_url, goals__max_turns=2, **QUIET)
    try:
        async with Tab(runner) as tab:
            await tab.say("/goal write the report")
            unreadable = await shown(tab, "↻ Continuing (1/2)")
            assert "the judge's answer could not be read ('I think it is fine')" in unreadable
            assert await shown(tab, "⏹") == ("⏹ The goal was not reached in 2 turns: the report is missing. "
                                             "/goal resume gives it 2 more turns; /goal clear drops it.")
            assert len([b for b in llm.requests if is_goal_turn(b)]) == 2
            await tab.say("/goal resume")
            await shown(tab, "▶️ Goal resumed")
            assert await shown(tab, "⏹ The goal was not reached in 4 turns")
            assert len([b for b in llm.requests if is_goal_turn(b)]) == 4
            await tab.say("/goal clear")
            assert await shown(tab, "Goal cleared")
    finally:
        await runner.stop()


async def test_stop_pauses_a_goal_and_resume_goes_on_with_its_new_criterion(tmp_path, llm: FakeLLM):
    release = asyncio.Event()
    judging = Judging(verdict(True, "done, with docs"))

    async def respond(body: dict[str, Any]) -> Reply | None:
        if is_goal_turn(body) and not release.is_set():
            await release.wait()  # the first goal turn waits until the test lets it go
        return judging(body)

    llm.responder = respond
    runner = await start_gateway(tmp_path, llm.base_url, **QUIET)
    try:
        async with Tab(runner) as tab:
            await tab.say("/goal build the site")
            await llm.wait_for_requests(1)
            await tab.say("/subgoal it has a docs page")
            assert (await shown(tab, "Added to the goal")).startswith("Added to the goal: it has a docs page")
            await tab.say("/stop")
            stopped = await shown(tab, "Stopped the running request.")
            assert "The goal is paused" in stopped
            await tab.say("/goal status")
            assert "paused" in await shown(tab, "🎯 Goal: build the site")
            release.set()
            await tab.say("/goal resume")
            assert await shown(tab, "✅") == "✅ Goal reached after 1 turn(s): done, with docs"
        [judge] = [b for b in llm.requests if is_judge(b)]
        assert "- it has a docs page" in judge["messages"][1]["content"]
        turns = [b for b in llm.requests if is_goal_turn(b)]
        assert len(turns) == 2 and "it has a docs page" in turns[1]["messages"][-1]["content"]
        states = await runner.parts.store.fetch("SELECT state FROM inbox WHERE platform_message_id LIKE 'goal:%'"
                                          " ORDER BY id")
        assert [r["state"] for r in states] == ["cancelled", "done"]
    finally:
        await runner.stop()


async def paused_goal(tab: Tab) -> None:
    """Set a goal and /stop it at once (whether or not its first turn has started): it is paused."""
    await tab.say("/goal build the site")
    assert "Goal set" in await shown(tab, "🎯")
    await tab.say("/stop")
    await tab.wait_for(lambda f: f["type"] in ("message", "edit") and f.get("final")
                       and "The goal is paused" in str(f["text"]))


async def test_status_names_the_open_goal_of_the_session(tmp_path, llm: FakeLLM):
    runner = await start_gateway(tmp_path, llm.base_url, **QUIET)
    try:
        async with Tab(runner) as tab:
            await paused_goal(tab)
            await tab.say("/status")
            status = await shown(tab, "Session:")
            assert "🎯 Goal: build the site" in status and "State: paused" in status
    finally:
        await runner.stop()


async def test_a_persons_message_interrupts_a_goal_turn_and_the_goal_carries_on(tmp_path, llm: FakeLLM):
    first_turn = asyncio.Event()
    judging = Judging(verdict(True, "finished"))

    async def respond(body: dict[str, Any]) -> Reply | None:
        if is_goal_turn(body) and not first_turn.is_set():
            first_turn.set()
            return Reply.hang()  # until the person's message interrupts it
        return judging(body)

    llm.responder = respond
    runner = await start_gateway(tmp_path, llm.base_url, gateway__busy_policy="interrupt", **QUIET)
    try:
        async with Tab(runner) as tab:
            await tab.say("/goal tidy the notes")
            await first_turn.wait()
            await tab.say("use headings please")
            assert await shown(tab, "echo: use headings please")
            assert await shown(tab, "✅") == "✅ Goal reached after 2 turn(s): finished"
        asked = [str(b["messages"][-1]["content"]) for b in llm.requests if not is_judge(b)]
        assert len(asked) == 3 and asked[1] == "use headings please"
        assert asked[2].startswith("[Goal, turn 2 of 20] Keep working toward the goal: tidy the notes")
    finally:
        await runner.stop()


async def test_a_goal_in_progress_carries_on_after_kill_9(tmp_path, tg: FakeTelegram):
    seen: list[str] = []

    async with FakeLLM() as llm:
        def respond(body: dict[str, Any]) -> Reply | None:
            seen.append("judge" if is_judge(body) else "turn")
            if seen in (["turn"], ["turn", "turn", "judge"]):
                return Reply.hang()  # the first turn, then the first judgement: the gateway is killed there
            if is_judge(body):
                return verdict(seen.count("judge") == 3, f"judgement {seen.count('judge')}")
            return Reply.text(f"worked ({seen.count('turn')})")

        llm.responder = respond
        daemon = Daemon(tmp_path, llm, telegram_settings(tg, review__enabled="false"))
        try:
            daemon.start()
            tg.user_message("/goal migrate the database")
            await llm.wait_for_requests(1, timeout=20)
            daemon.kill()  # during the goal's first turn
            daemon.start()
            await llm.wait_for_requests(3, timeout=20)  # the turn again, then its judge
            daemon.kill()  # while the judge decides
            daemon.start()
            await wait_for_text(tg, "↻ Continuing (1/20): judgement 2", timeout=20)
            await wait_for_text(tg, "✅ Goal reached after 2 turn(s): judgement 3", timeout=20)
            assert seen == ["turn", "turn", "judge", "judge", "turn", "judge"]
            rows = daemon.rows("SELECT state, turns FROM goals")
            assert [tuple(r) for r in rows] == [("done", 2)]
            goal_rows = daemon.rows("SELECT platform_message_id, state FROM inbox WHERE platform_message_id"
                                    " LIKE 'goal:%' ORDER BY id")
            assert [tuple(r) for r in goal_rows] == [("goal:1:1", "done"), ("goal:1:2", "done")]
        finally:
            daemon.close()


async def test_a_goal_in_a_telegram_group_answers_there_without_quoting_its_own_turns(tmp_path, llm: FakeLLM,
                                                                                    tg: FakeTelegram):
    llm.responder = Judging(verdict(False, "half done"), verdict(True, "all done"))
    runner = await start_gateway(tmp_path, llm.base_url, **telegram_settings(tg, **QUIET))
    try:
        command = tg.user_message("/goal sort the shelf", chat_type="group")
        group = command["message"]["chat"]["id"]
        await wait_for_text(tg, "✅ Goal reached after 2 turn(s): all done")
        replies = [m for m in tg.sent_messages(group) if m.text and m.text.startswith("echo: [Ann] [Goal")]
        assert len(replies) == 2 and all(m.reply_to_message_id is None for m in replies)  # no made-up message ids
        assert "↻ Continuing (1/20): half done" in [m.text for m in tg.sent_messages(group)]
    finally:
        await runner.stop()


def test_the_judges_answer_is_read_leniently_and_unreadable_means_continue():
    assert read_verdict('{"done": true, "reason": "ok"}').done
    assert read_verdict('Sure! {"done": false, "reason": "x"} hope that helps').reason == "x"
    unread = read_verdict('{"done": "yes"}')
    assert not unread.done and not unread.readable and "could not be read" in unread.reason
    assert not read_verdict("").done


async def test_a_persons_message_whose_id_looks_like_a_goal_turn_is_answered_as_theirs(tmp_path, llm: FakeLLM):
    """The web chat's page names its messages' ids: one named like a goal's turn is still a person's message
    (what a row is comes from its origin, never from its id)."""
    runner = await start_gateway(tmp_path, llm.base_url, **QUIET)
    try:
        async with Tab(runner) as tab:
            await paused_goal(tab)
            await tab.say("is it done yet?", msg_id="goal:1:9")
            assert await shown(tab, "echo: is it done yet?") == "echo: is it done yet?"
        row = await runner.parts.store.fetchrow("SELECT origin, state FROM inbox WHERE platform_message_id = 'goal:1:9'")
        assert (row["origin"], row["state"]) == ("person", "done")
    finally:
        await runner.stop()


async def test_a_judge_that_never_answers_pauses_the_goal_at_the_turn_deadline(tmp_path, llm: FakeLLM):
    llm.responder = lambda body: Reply.hang() if is_judge(body) else None
    runner = await start_gateway(tmp_path, llm.base_url, llm__turn_timeout_seconds=2, **QUIET)
    try:
        async with Tab(runner) as tab:
            await tab.say("/goal build the site")
            paused = await shown(tab, "⏸ The goal is paused: the judge could not be reached", timeout=30)
            assert "The language model did not answer in time (nothing came for 2 s)" in paused, paused
            await tab.say("/goal status")
            assert "paused" in await shown(tab, "🎯 Goal: build the site")
    finally:
        await runner.stop()
