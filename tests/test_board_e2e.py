"""The task board end to end (a gateway in this process, the fake LLM as a scripted model: tests/board_model.py):
tasks run as goals in order of their dependencies, never more than `board.max_running` at once; a task asks its
chat and goes on with the answer; a run that keeps failing blocks the task and tells the admins once; the agent
splits work into subtasks that run in order; in a shared group only a task's owner or an admin steers it."""

from __future__ import annotations

from typing import Any

from agent.goal_judge import JUDGE_IDENTITY
from gateway.storage.board import Task
from platforms.base import ChatRef
from tests.board_model import BoardModel, board_call, scripted, verdict
from tests.fakes.llm import FakeLLM, Reply
from tests.fakes.telegram import FakeTelegram
from tests.harness import ANN, Tab, eventually, is_prompt, press, start_gateway, telegram_gateway, wait_for_text

QUIET = {"review__enabled": "false", "board__stale_seconds": "2"}
BOB, EVE, GROUP = 2002, 3003, -5005


async def all_done(runner: Any, n: int, timeout: float = 20.0) -> list[Task]:
    board = runner.parts.store.board

    async def done() -> bool:
        return (await board.counts())["done"] == n
    await eventually(done, timeout=timeout, what=f"{n} tasks done")
    return await board.list()


async def test_dependencies_run_in_order_and_never_more_than_max_running_at_once(tmp_path, llm: FakeLLM):
    model = scripted(llm)
    for name in ("migrate", "verify", "announce", "a", "b", "c"):  # (each turn takes a while: overlaps would show)
        model.plans[name] = lambda turn, text, body, name=name: Reply.text(f"did {name}", delay=0.15)
    runner = await start_gateway(tmp_path, llm.base_url, board__max_running="2", **QUIET)
    try:
        board = runner.parts.store.board
        migrate = await board.add("migrate")  # added by another process's way: the dispatcher's watch sees it
        verify = await board.add("verify", parents=[migrate.id])
        announce = await board.add("announce", parents=[verify.id])
        for name in ("a", "b", "c"):
            await board.add(name)
        tasks = await all_done(runner, 6)
        assert {t.attempts for t in tasks} == {1} and all(t.result.startswith("did ") for t in tasks)
        events = sorted([e for t in tasks for e in await board.events(t.id)], key=lambda e: e.id)
        running, most, order = set(), 0, []
        for event in events:
            if event.kind == "started":
                running.add(event.task_id)
                most = max(most, len(running))
            elif event.kind == "done":
                running.discard(event.task_id)
                order.append(event.task_id)
        assert most == 2  # (two at once, never three)
        assert order.index(migrate.id) < order.index(verify.id) < order.index(announce.id)
        assert [e.kind for e in await board.events(verify.id)][:2] == ["added", "ready"]
    finally:
        await runner.stop()


async def test_a_task_asks_its_chat_and_goes_on_with_the_answer(tmp_path, llm: FakeLLM):
    model = scripted(llm)

    def paint(turn: int, text: str, body: dict[str, Any]) -> Reply:
        if "blue" in text:  # the answer came back as a comment the next turn reads
            return Reply.text("painted the fence blue")
        return board_call(action="block", question="Which colour should the fence be?")
    model.plans["paint the fence"] = paint
    runner = await start_gateway(tmp_path, llm.base_url, **QUIET)
    try:
        async with Tab(runner) as tab:
            await tab.say("/task add paint the fence")
            asked = await tab.wait_for(lambda f: f.get("final") and "needs you" in str(f.get("text")))
            assert asked["text"] == ("❓ Task 1 (paint the fence) needs you: Which colour should the fence be?\n"
                                     "Answer with /task answer 1 followed by your answer")
            task = await runner.parts.store.board.get(1)
            assert (task.status, task.question) == ("blocked", "Which colour should the fence be?")
            judged = [b for b in llm.requests if b["messages"][0]["content"] == JUDGE_IDENTITY]
            assert judged == []  # a blocked turn is not judged
            await tab.say("/task answer 1 blue, please")
            done = await tab.wait_for(lambda f: f.get("final") and str(f.get("text")).startswith("✅ Task 1"))
            assert done["text"] == "✅ Task 1 done: paint the fence\n\npainted the fence blue"
            await tab.say("/task show 1")
            shown = await tab.wait_for(lambda f: f.get("final") and str(f.get("text")).startswith("✅ 1 [done]"))
            assert "blue, please" in shown["text"] and "blocked" in shown["text"]
        assert [(task_id, turn) for task_id, turn, _ in model.turns] == [(1, 1), (1, 1)]  # (a new run: turn 1 again)
        assert "blue, please" in model.turns[1][2]
    finally:
        await runner.stop()


async def test_the_agent_splits_a_task_into_subtasks_that_run_in_order(tmp_path, llm: FakeLLM):
    model = scripted(llm)
    made: list[str] = []  # (the big job's turns)

    def plan(turn: int, text: str, body: dict[str, Any]) -> Reply | None:
        made.append(text)
        if turn == 1:
            return board_call(action="create", title="step one", body="the first half")
        return board_call(action="create", title="step two", after=[2])  # (the judge is then content)
    model.plans["big job"] = plan
    model.judged["big job"] = [verdict(False, "only the first step is on the board")]
    runner = await start_gateway(tmp_path, llm.base_url, **QUIET)
    try:
        async with Tab(runner) as tab:
            await tab.say("/task add big job")
            tasks = await all_done(runner, 3)
            big, one, two = sorted(tasks, key=lambda t: t.id)
            assert (one.title, one.created_by, one.owner, one.origin) == ("step one", big.id, big.owner, big.origin)
            assert (two.parents, two.created_by) == ((one.id,), big.id)
            assert one.done_at <= two.done_at and len(made) == 2
            assert "only the first step is on the board" in made[1]  # (the judge's note, read by turn 2)
            await tab.wait_for(lambda f: f.get("final") and str(f.get("text")).startswith("✅ Task 3"))
    finally:
        await runner.stop()


async def test_a_run_that_keeps_failing_blocks_the_task_and_tells_the_admins_once(tmp_path, llm: FakeLLM,
                                                                                  tg: FakeTelegram):
    model = scripted(llm)
    model.plans["flaky"] = lambda turn, text, body: Reply.error(500, message="the model is down")
    runner = await telegram_gateway(tmp_path, llm, tg, access__admins=f"{{telegram: [{ANN}]}}", llm__max_retries="0",
                                    board__max_attempts="2", board__retry_seconds="0", **QUIET)
    try:
        chat = ChatRef("telegram", str(GROUP))
        task = await runner.parts.store.board.add("flaky", owner=("telegram", str(ANN)), origin=chat)
        await wait_for_text(tg, f"⚠️ Task {task.id} (flaky) is blocked: its runs failed 2 times; the last: "
                                "The language model service failed (HTTP 500) and did not recover after retries. "
                                f"Please try again shortly.. Answer it (/task answer {task.id} … or chatgate board "
                                f"answer {task.id} …) to let it run again.", timeout=20)
        blocked = await runner.parts.store.board.get(task.id)
        assert (blocked.status, blocked.attempts) == ("blocked", 2) and "failed 2 times" in blocked.reason
        to_admin = [m for m in tg.sent_messages(ANN) if "is blocked" in (m.text or "")]
        in_chat = [m for m in tg.sent_messages(GROUP) if "needs you" in (m.text or "")]
        assert len(to_admin) == 1 and len(in_chat) == 1
        assert [e.kind for e in await runner.parts.store.board.events(task.id)].count("failed") == 1
    finally:
        await runner.stop()


async def test_in_a_shared_group_only_the_owner_or_an_admin_steers_a_task_and_only_its_tasks_show(
        tmp_path, llm: FakeLLM, tg: FakeTelegram):
    model = scripted(llm)
    model.plans["ann's task"] = lambda turn, text, body: board_call(action="block", question="ok?")
    runner = await telegram_gateway(tmp_path, llm, tg, access__allowed_users=f"{{telegram: [{ANN}, {BOB}]}}",
                                    access__dm_policy="open", **QUIET)
    try:
        tg.user_message("/task add ann's task", chat_id=GROUP, chat_type="group", user_id=ANN)
        await wait_for_text(tg, "❓ Task 1 (ann's task) needs you: ok?\nAnswer with /task answer 1 followed by your "
                                "answer")
        tg.user_message("/task answer 1 no way", chat_id=GROUP, chat_type="group", user_id=BOB)
        await wait_for_text(tg, "⚠️ only the person who added task 1, or an admin, can answer or cancel it")
        tg.user_message("/task cancel 1", chat_id=GROUP, chat_type="group", user_id=BOB)
        tg.user_message("/task add eve's", user_id=EVE)  # (anyone may write to the bot: dm_policy open)
        await wait_for_text(tg, "Only allowed users and admins can use the task board.")
        assert (await runner.parts.store.board.get(1)).status == "blocked"
        assert len(await runner.parts.store.board.list()) == 1
        tg.user_message("/task add ann's private errand", user_id=ANN)  # (her direct chat: task 2)
        await wait_for_text(tg, "✅ Task 2 done: ann's private errand\n\ndid ann's private errand")
        tg.user_message("/task list", chat_id=GROUP, chat_type="group", user_id=ANN)
        await wait_for_text(tg, "❓ 1 [blocked] ann's task")  # (the group's only: everyone there reads it)
        tg.user_message("/task show 2", chat_id=GROUP, chat_type="group", user_id=ANN)
        await wait_for_text(tg, "⚠️ There is no task 2 here.")
        tg.user_message("/task list", user_id=ANN)
        await wait_for_text(tg, "❓ 1 [blocked] ann's task\n✅ 2 [done] ann's private errand")
        tg.user_message("/task cancel 1", chat_id=GROUP, chat_type="group", user_id=ANN)
        await wait_for_text(tg, "🗄 1 [archived] ann's task\nCancelled.")
    finally:
        await runner.stop()


async def test_a_tasks_dangerous_command_asks_its_owner_in_its_chat_and_one_without_a_chat_is_refused(
        tmp_path, llm: FakeLLM, tg: FakeTelegram):
    model = scripted(llm)
    model.plans["clean up"] = lambda turn, text, body: Reply.tool_calls([("terminal", {"command": "rm -rf victim"})])
    # (both tasks' titles start so: each asks to delete the folder)
    (tmp_path / "ws" / "victim").mkdir(parents=True)
    runner = await telegram_gateway(tmp_path, llm, tg, agent__workspace=tmp_path / "ws", **QUIET)
    try:
        board = runner.parts.store.board
        quiet = await board.add("clean up quietly")  # the operator's, with no chat: nobody can approve
        await eventually(lambda: any("nobody can approve" in str(b["messages"][-1].get("content"))
                                     for b in llm.requests), timeout=20, what="the refusal in the tool's result")
        assert (tmp_path / "ws" / "victim").exists() and (await board.get(quiet.id)).status in ("running", "done")
        tg.user_message("/task add clean up")  # Ann's, in her chat
        [prompt] = await tg.wait_for("sendMessage", lambda c: "Approval needed" in str(c.get("text"))
                                     and c.get("chat_id") == str(ANN))
        assert "task 2" in str(prompt.get("text"))  # (on whose behalf it asks)
        allow = next(b["callback_data"] for row in prompt.get("reply_markup")["inline_keyboard"] for b in row
                     if b["text"] == "Allow once")
        tg.callback_query(allow, message_id=prompt.result["message_id"])
        await eventually(lambda: not (tmp_path / "ws" / "victim").exists(), what="the owner's approval")
        await all_done(runner, 2)
    finally:
        await runner.stop()


async def test_the_board_tool_in_an_ordinary_turn_creates_lists_and_comments_for_its_person(tmp_path, llm: FakeLLM):
    calls = iter([board_call(action="create", title="water the plants", body="every pot"),
                  board_call(action="list"), board_call(action="comment", task=1, text="the fern too"),
                  board_call(action="block", question="why?"), board_call(action="comment", task=99, text="x")])

    model = BoardModel()  # (the task it makes runs meanwhile: answered and judged done)

    def respond(body: dict[str, Any]) -> Reply | None:
        last = body["messages"][-1]
        if last["role"] == "tool" and body["messages"][-3].get("content", "").startswith("board step"):
            return Reply.text("ok")
        return next(calls, None) if str(last.get("content")).startswith("board step") else model(body)
    llm.responder = respond
    runner = await start_gateway(tmp_path, llm.base_url, board__max_running="1", **QUIET)
    try:
        async with Tab(runner) as tab:
            for n in range(1, 6):
                await tab.say(f"board step {n}")
                if n == 1:  # (a task the agent adds in a person's turn waits for their yes)
                    prompt = await tab.wait_for(is_prompt)
                    assert "task: water the plants\nevery pot" in prompt["text"]
                    await press(tab, prompt, "Allow once")
                await tab.wait_for(lambda f: f.get("final") and f.get("text") == "ok", count=n)
        results = [str(b["messages"][-1]["content"]) for b in llm.requests if b["messages"][-1]["role"] == "tool"]
        assert results[0].startswith("created: 🟢 1 [ready] water the plants")
        assert "water the plants" in results[1]
        assert results[2] == "comment added to task 1"
        assert results[3] == "error: block is for a task's run (there is no task to wait here)"
        assert results[4] == "error: there is no task 99 you may comment on"
        task = await runner.parts.store.board.get(1)
        assert task.owner == ("webchat", "local") and task.origin.platform == "webchat" and task.created_by is None
        assert "the fern too" in [e.text for e in await runner.parts.store.board.events(1)]
    finally:
        await runner.stop()


async def test_a_run_that_does_not_end_in_time_fails_and_frees_its_slot(tmp_path, llm: FakeLLM):
    model = scripted(llm)
    model.plans["endless"] = lambda turn, text, body: Reply.hang()
    runner = await start_gateway(tmp_path, llm.base_url, board__run_timeout_seconds="1", board__max_attempts="1",
                                 board__max_running="1", **QUIET)
    try:
        board = runner.parts.store.board
        endless, after = await board.add("endless"), await board.add("after it")

        async def blocked() -> bool:
            return (await board.get(endless.id)).status == "blocked"
        await eventually(blocked, timeout=20, what="the endless task blocked")
        assert "did not finish within 1 s (board.run_timeout_seconds)" in (await board.get(endless.id)).reason
        await all_done(runner, 1)  # (the one slot went on to the next task)
        assert (await board.get(after.id)).status == "done"
    finally:
        await runner.stop()
