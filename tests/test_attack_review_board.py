"""The task board attacked: by the model (whose words pick the `board` tool's arguments), by chat members, by a
person whose access was revoked, and by an operator's bad values. Each test is one finding of the review; the
board is the real one (gateway.board) on a real Store (both engines where the store is what is attacked), the
tool called the way the agent loop calls it (`ToolScope.call`, JSON arguments)."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any

import pytest

from agent.tools import Place, ToolContext, ToolRegistry, TurnShare
from gateway.access.pairing import Pairing
from gateway.access.trust import Trust
from gateway.board.dispatcher import Dispatcher
from gateway.board.runs import TaskRuns, session_key
from gateway.board.tasks import Board
from gateway.board.words import MAX_BODY
from gateway.board.tool import board_tool
from gateway.config import AccessConfig, BoardConfig, ConfigError, load_config
from gateway.storage import Store
from platforms.base import ChatRef
from tests.board_model import BoardModel, board_call
from tests.fakes.llm import FakeLLM
from tests.harness import Approver, eventually, start_gateway
from tests.test_board_cli import Home

ANN, BOB, ADMIN = ("telegram", "1"), ("telegram", "2"), ("telegram", "9")
ANN_DM = ChatRef("telegram", "1")


def trust_of(store: Store, allowed: tuple[str, ...] = ("1", "2")) -> Trust:
    access = AccessConfig.model_validate({"allowed_users": {"telegram": list(allowed)},
                                          "admins": {"telegram": ["9"]}})
    return Trust(access, Pairing(store.access), frozenset())


async def board_on(store: Store, **trust: Any) -> Board:
    return Board(store.board, trust_of(store, **trust), changed=lambda: None)


def call_tool(board: Board, ctx: ToolContext, **arguments: Any) -> Any:
    """The `board` tool as the agent loop calls it: the model's JSON, through the run's tool scope."""
    return ToolRegistry([board_tool(board)]).scope().call("board", json.dumps(arguments), ctx)


def in_run(task_id: int, person: tuple[str, str] = ANN) -> ToolContext:
    """The context of a turn of task `task_id`'s run (its owner's rights; a turn share of its own)."""
    return ToolContext(platform=person[0], chat_id=person[1], user_id=person[1],
                       place=Place(session_key=session_key(task_id)), turn=TurnShare())


def in_chat(person: tuple[str, str] = ANN, approved: bool = True) -> ToolContext:
    """The context of a person's own turn in their direct chat (who says yes to a task the agent adds)."""
    return ToolContext(platform=person[0], chat_id=person[1], user_id=person[1], approvals=Approver(approved),
                       place=Place(session_key=f"{person[0]}:{person[1]}"))


# -- the model: tasks without end --------------------------------------------------------------------


async def test_a_chain_of_tasks_each_making_the_next_does_not_go_on_forever(open_store):
    """Finding: `MAX_CREATED` counted the tasks one task made, not its descendants. A model that, in every task's
    run, splits off "the next step" (one task each time: always under the limit) and calls this one done makes
    a chain that never ends — each run another goal's worth of turns, with its owner's rights."""
    store = await open_store()
    board = await board_on(store)
    await board.add("step 0", owner=ANN, origin=ANN_DM)
    made = 0
    for step in range(1, 60):
        [running] = await store.board.claim("me", 1)
        answer = await call_tool(board, in_run(running.id), action="create", title=f"step {step}")
        await store.board.finish(running.id, "me", "did my part; the next step is on the board", None)
        if not answer.startswith("created:"):
            assert "at most" in answer, answer
            break
        made += 1
    assert made <= 20, f"{made} tasks made by one chain of runs"


async def test_a_persons_turn_cannot_flood_the_board(open_store):
    """Finding: outside a task's run the tool had no limit at all: one turn (a model led by a web page it read)
    could add a task per step, each to run later as a goal with the person's rights. Now a person has at most
    `MAX_OPEN` open tasks (an admin too: the tool acts in their name just the same)."""
    store = await open_store()
    board = await board_on(store)
    answers = [await call_tool(board, in_chat(), action="create", title=f"task {n}") for n in range(120)]
    created = [a for a in answers if a.startswith("created:")]
    assert len(created) < 120 and "open tasks" in answers[-1], answers[-1]
    refused = await board.command("add one more", *ANN, ANN_DM)  # (the same limit for /task add)
    assert refused.startswith("⚠️") and "open tasks" in refused
    operator = await store.board.add("the operator's", author="operator")  # (chatgate board is not limited)
    assert operator.id > 0


async def test_a_cancelled_tasks_run_cannot_go_on_making_tasks(open_store):
    """Finding: a cancelled task's run goes on until its next heartbeat (up to a quarter of stale_seconds); its
    board tool kept making subtasks in the cancelled task's name, which then ran: /task cancel did not stop a
    runaway task."""
    store = await open_store()
    board = await board_on(store)
    task = await board.add("runaway", owner=ANN, origin=ANN_DM)
    await store.board.claim("me", 1)
    await board.cancel(task.id, *ANN)
    answer = await call_tool(board, in_run(task.id), action="create", title="more work")
    assert answer.startswith("error:") and "archived" in answer, answer
    assert [t.id for t in await store.board.list()] == [task.id]


# -- the model: sizes and characters -----------------------------------------------------------------


async def test_a_comment_or_a_question_from_the_model_is_bounded(open_store):
    """Finding: titles and descriptions were bounded, a comment (read by another task's next turn) and a
    block's question (sent to the chat) were not: one tool call could put megabytes into another run's prompt."""
    store = await open_store()
    board = await board_on(store)
    mine = await board.add("mine", owner=ANN, origin=ANN_DM)
    other = await board.add("other", owner=ANN, origin=ANN_DM)
    await store.board.claim("me", 1)
    huge = "x" * (MAX_BODY * 20)
    commented = await call_tool(board, in_run(mine.id), action="comment", task=other.id, text=huge)
    assert commented.startswith("error:"), commented[:200]
    assert not [e for e in await store.board.events(other.id) if e.kind == "comment"]
    ctx = in_run(mine.id)
    blocked = await call_tool(board, ctx, action="block", question=huge)
    assert blocked.startswith("error:") and ctx.turn.ended is None, blocked[:200]
    answered = await board.command(f"answer {mine.id} {huge}", *ANN, ANN_DM)  # (a web chat message has no limit)
    assert answered.startswith("⚠️"), answered[:200]


async def test_a_title_keeps_no_control_characters(open_store):
    """Finding: `" ".join(title.split())` takes out line breaks but not an escape (ESC [ …) or a bidi override:
    a title from a chat or the model went raw into the daemon's log lines ("task 3 started: …") and into the
    notices other people read, where it could recolour a terminal or reorder the text around it."""
    store = await open_store()
    board = await board_on(store)
    made = await call_tool(board, in_chat(), action="create", title="fix \x1b[2J\x1b[31mit\u202e\u200bnow\x07")
    assert made.startswith("created:")
    [task] = await store.board.list()
    assert task.title.isprintable() and "fix" in task.title and "now" in task.title, repr(task.title)
    await store.board.claim("me", 1)
    ctx = in_run(task.id)
    await call_tool(board, ctx, action="block", question="which \x1b]0;owned\x07 colour?")
    assert ctx.turn.ended is not None and ctx.turn.ended.isprintable(), repr(ctx.turn.ended)


# -- people: bad input -------------------------------------------------------------------------------


@pytest.mark.parametrize("args", ["show ²", "cancel ¹", "answer ³ yes", "show 99999999999999999999",
                                  "cancel 99999999999999999999", "show " + "1" * 5000])
async def test_a_task_number_that_is_no_number_gets_an_answer_not_a_crash(open_store, args):
    """Finding: `str.isdigit()` holds for "²" (int() refuses it) and for a number past 64 bits (the database
    refuses it) and for 5,000 digits (int() refuses it): the command raised, so the person got no answer and the
    log a traceback. The CLI's parser already refused these (gateway.cli.parsers.board.task_id)."""
    store = await open_store()
    board = await board_on(store)
    answer = await board.command(args, *ANN, ANN_DM)
    assert answer.startswith(("⚠️", "Tasks the agent")), answer


async def test_the_tools_task_numbers_are_read_the_same_way(open_store):
    store = await open_store()
    board = await board_on(store)
    task = await board.add("mine", owner=ANN, origin=ANN_DM)
    for bad in ("²", "99999999999999999999"):
        answer = await call_tool(board, in_chat(), action="comment", task=bad, text="hi")
        assert answer.startswith("error:") and "failed" not in answer, answer
    made = await call_tool(board, in_chat(), action="create", title="after", after=[task.id, "²", 2**70])
    assert made.startswith("created:"), made
    assert (await store.board.list())[-1].parents == (task.id,)


# -- a revoked owner ---------------------------------------------------------------------------------


async def test_a_task_whose_owner_lost_access_does_not_run_in_their_name(tmp_path, llm: FakeLLM):
    """Finding: a scheduled job whose owner no longer has access is not run (gateway.cron.runs); a task was: it
    ran as a goal with their rights, and its board tool (no rank check in a run) went on making tasks in their
    name. Now it is blocked before it starts, with the reason, and nothing is asked of the model."""
    model = BoardModel()
    llm.responder = model
    model.plans["left over"] = lambda turn, text, body: board_call(action="create", title="and another")
    runner = await start_gateway(tmp_path, llm.base_url, review__enabled="false", board__stale_seconds="2",
                                 access__allowed_users="{telegram: ['1']}")
    try:
        board = runner.parts.store.board
        task = await board.add("left over", owner=("telegram", "777"), origin=ChatRef("telegram", "777"),
                               author="telegram:777")  # (777 was an allowed user when they added it)

        async def settled() -> bool:
            return (await board.get(task.id)).status in ("blocked", "done")
        await eventually(settled, timeout=20, what="the task settled")
        found = await board.get(task.id)
        assert found.status == "blocked" and "no longer" in (found.reason or ""), found
        assert model.turns == [] and len(await board.list()) == 1
    finally:
        await runner.stop()


# -- a run that cannot tell its chat -----------------------------------------------------------------


@dataclass
class Notices:
    """A delivery that records the notices; `broken`: its outbox refuses the row (a database that is locked or
    gone for a moment)."""

    broken: bool = False
    tried: list[str] = field(default_factory=list)

    async def reply(self, chat: ChatRef, text: str, **_: Any) -> None:
        self.tried.append(text)
        if self.broken:
            raise OSError("database is locked")

    async def deliver(self, item: Any) -> bool:
        return False


async def test_a_run_whose_start_notice_fails_does_not_hold_its_slot_for_ever(open_store):
    """Finding: the "started" notice was queued before the run's try: when queuing it failed the run raised with
    its task left `running` on this instance, no heartbeat; nobody reclaims a task of the instance that is alive
    (on SQLite never, until a restart), so it held one of `board.max_running` slots for ever."""
    store = await open_store()
    board = await board_on(store)
    task = await board.add("report", owner=ANN, origin=ANN_DM)
    [claimed] = await store.board.claim("me", 1)
    delivery = Notices(broken=True)
    told: list[str] = []

    async def tell_admins(text: str) -> None:
        told.append(text)
    runs = TaskRuns(store=store.board, transcripts=store.sessions, agent=None, judge=None,
                    tools=ToolRegistry().scope(), approvals=None, consent_off=False, trust=board.trust,
                    delivery=delivery, tell_admins=tell_admins, instance_id="me",
                    settings=BoardConfig(retry_seconds=0), max_turns=1, timezone=None)
    try:
        await runs.run(claimed)
    except OSError:
        pass
    assert delivery.tried, "the start notice was not tried"
    after = await store.board.get(task.id)
    assert after.status != "running", "the task is left running with no run"


# -- the operator's values ---------------------------------------------------------------------------


@pytest.mark.parametrize("key,value", [("STALE_SECONDS", "inf"), ("STALE_SECONDS", "1e12"),
                                       ("RETRY_SECONDS", "inf"), ("RETRY_SECONDS", "1e300")])
def test_a_board_timing_that_never_comes_is_refused(tmp_path, key, value):
    """Finding: `board.stale_seconds: inf` (or a year) was taken: a run then never beats, so a cancelled task's
    run never stops and a lost one is never found again; `retry_seconds: inf` puts a failed task off for ever
    while it still reads `ready`. Other timings of the config are bounded (`le=`)."""
    with pytest.raises(ConfigError, match=f"board.{key.lower()}"):
        load_config(env={"CHATGATE_HOME": str(tmp_path), f"CHATGATE_BOARD__{key}": value})


# -- a run and its heartbeat -------------------------------------------------------------------------


class WaitingAgent:
    """An agent whose turns wait until the test lets them end (the turn of a run still going)."""

    def __init__(self) -> None:
        self.started: list[str] = []

    async def run_turn(self, history: list[Any], text: str, *args: Any, **kwargs: Any) -> Any:
        self.started.append(text)
        await asyncio.Event().wait()  # (until the run is stopped)


async def test_a_run_whose_task_was_reclaimed_and_started_again_on_its_instance_stops(open_store):
    """Finding: a run knew its task as "running on this instance". When another instance found the run lost (its
    heartbeats failed for stale_seconds: a stalled connection) and freed the task, and this instance claimed it
    again, the first run's heartbeat held once more (same instance, running): two runs of one task went on side
    by side. The heartbeat now holds only for the run it started (the task's attempt)."""
    store = await open_store()
    board = await board_on(store)
    task = await board.add("long job", owner=ANN, origin=ANN_DM)
    agent = WaitingAgent()
    told: list[str] = []

    async def tell_admins(text: str) -> None:
        told.append(text)
    delivery = Notices()
    runs = TaskRuns(store=store.board, transcripts=store.sessions, agent=agent, judge=None,
                    tools=ToolRegistry().scope(), approvals=None, consent_off=False, trust=board.trust,
                    delivery=delivery, tell_admins=tell_admins, instance_id="A",
                    settings=BoardConfig(stale_seconds=1), max_turns=1, timezone=None)
    [first] = await store.board.claim("A", 1)
    old = asyncio.create_task(runs.run(first))
    try:
        await eventually(lambda: agent.started, what="the first run's turn")
        assert await store.board.release(task.id, "A", kind="reclaimed", text="its run on A was lost")  # (B)
        [again] = await store.board.claim("A", 1)  # (A's next look)
        assert again.attempts == 2
        await eventually(old.done, timeout=5, what="the first run stopped")
        assert (await store.board.get(task.id)).status == "running"  # (the second run's claim stands)
    finally:
        old.cancel()
        await asyncio.gather(old, return_exceptions=True)


class HeldRuns:
    """Runs that go on until the test ends each (`ends`, in the order they started; `tasks`: their asyncio tasks)."""

    def __init__(self) -> None:
        self.ends: list[asyncio.Event] = []
        self.tasks: list[asyncio.Task[Any]] = []

    async def run(self, task: Any) -> None:
        ends = asyncio.Event()
        self.ends.append(ends)
        self.tasks.append(asyncio.current_task())
        await ends.wait()


async def test_the_dispatcher_keeps_count_of_a_tasks_second_run_when_its_first_ends(open_store):
    """Finding (with the one above): the dispatcher filed runs by task; when a task was claimed again while its
    first run was still stopping, the first run's end removed the second from `running` — and `stop` then left
    the second going at shutdown, on a database being closed."""
    store = await open_store()
    task = await store.board.add("long job")
    runs = HeldRuns()
    dispatcher = Dispatcher(store.board, runs, None, instance_id="A", max_running=2, stale_seconds=60)
    await dispatcher.look()
    await store.board.release(task.id, "A", kind="reclaimed", text="its run on A was lost")  # (by B)
    await dispatcher.look()
    await eventually(lambda: len(runs.tasks) == 2, what="both runs started")
    first, second = runs.tasks
    runs.ends[0].set()
    await asyncio.wait({first})  # (its done callbacks, the dispatcher's first, have run)
    assert dispatcher.running == [task.id], "the second run is no longer counted"
    await dispatcher.stop(timeout=5)
    assert second.cancelled(), "stop left the second run going"


def test_the_cli_keeps_a_chats_limits_on_a_task(tmp_path):
    """Finding (an operator's slip, `$(cat big.log)` as a title): `chatgate board` took a title of any length and
    lines, a body, comment or answer of any size: each went into every listing, notice and run's prompt."""
    home = Home(tmp_path / "home", None)
    assert home.refused("board", "add", "x" * 5000).startswith("chatgate board: keep a title under 200")
    assert home.refused("board", "add", "ok", "--body", "y" * (MAX_BODY + 1)).startswith("chatgate board: keep")
    added = home.json("board", "add", "two\nlines\x1b[31m")
    assert added["title"] == "two lines [31m"
    assert home.refused("board", "comment", "1", "z" * (MAX_BODY + 1)).startswith("chatgate board: keep the text")


async def test_the_limits_hold_for_tool_calls_made_at_once(open_store):
    """Finding: the agent loop runs one step's tool calls concurrently (agent.loop._tool_step). The limits were
    read, then the task written, in two steps: a model that asked for 80 tasks in one step had every count read
    before the first was written, and got them all."""
    store = await open_store()
    board = await board_on(store)
    answers = await asyncio.gather(*(call_tool(board, in_chat(), action="create", title=f"task {n}")
                                     for n in range(80)))
    assert sum(a.startswith("created:") for a in answers) == 50
    [running] = await store.board.claim("me", 1)
    await board.cancel(running.id, *ANN)  # (room for one more of Ann's: its run makes them)
    for task in await store.board.list():
        if task.status in ("ready", "todo"):
            await store.board.cancel(task.id, "operator")
    parent = await board.add("parent", owner=ANN, origin=ANN_DM)
    [running] = await store.board.claim("me", 1)
    answers = await asyncio.gather(*(call_tool(board, in_run(running.id), action="create", title=f"sub {n}")
                                     for n in range(40)))
    assert sum(a.startswith("created:") for a in answers) == 20, [a for a in answers if not a.startswith("c")]
    assert parent.id == running.id


# -- what others' tasks show -------------------------------------------------------------------------


async def test_a_task_can_only_come_after_tasks_its_person_may_see(open_store):
    """Finding: `after` took any task's number, and the answer said what became of it: `[ready]` (that task is
    done), `[todo]` (it is not), "was cancelled", "does not exist" — Bob's model could read the state of Ann's
    tasks in her direct chat, one number at a time. A task comes after the tasks of its chat, or its person's."""
    store = await open_store()
    board = await board_on(store)
    anns = await board.add("ann's private errand", owner=ANN, origin=ANN_DM)
    bobs_chat = ChatRef("telegram", "2")
    bobs = await board.add("bob's first", owner=BOB, origin=bobs_chat)
    answer = await call_tool(board, in_chat(BOB), action="create", title="after ann's", after=[anns.id])
    assert answer == f"error: there is no task {anns.id} here", answer
    answer = await call_tool(board, in_chat(BOB), action="create", title="after mine", after=[bobs.id])
    assert answer.startswith("created:") and f"(after {bobs.id})" in answer, answer
    admin = await call_tool(board, in_chat(ADMIN), action="create", title="after ann's", after=[anns.id])
    assert admin.startswith("created:"), admin  # (an admin steers every task)


async def test_show_in_a_chat_names_people_not_the_instances_that_ran_a_task(open_store):
    """Finding: `/task show` listed each event's author, and for a run's events that is the instance id — the
    machine's host name, its pid namespace and the daemon's pid — shown to everyone in the task's chat."""
    store = await open_store()
    board = await board_on(store)
    task = await board.add("report", owner=ANN, origin=ANN_DM)
    await store.board.claim("db-host-7:4026531836:4242:beef", 1)
    await store.board.note_turn(task.id, "db-host-7:4026531836:4242:beef", 1)
    await store.board.comment(task.id, "telegram:1", "use the new numbers")
    shown = await board.command(f"show {task.id}", *ANN, ANN_DM)
    assert "db-host-7" not in shown and "4242" not in shown, shown
    assert "· comment (telegram:1): use the new numbers" in shown and "· started" in shown, shown


async def test_a_task_the_agent_adds_in_a_persons_turn_waits_for_their_yes(open_store):
    """Finding (reported, then fixed): the tool's `create` asked nobody, where the cron tool's asks the person: a
    prompt-injected turn could leave an unattended task to run later in the person's name."""
    store = await open_store()
    board = await board_on(store)
    context = in_chat(approved=False)
    answer = await call_tool(board, context, action="create", title="send the files away", body="all of them")
    assert answer == "Denied." and await store.board.list() == []
    [asked] = context.approvals.requests
    assert (asked.kind, asked.subject) == ("job", "task: send the files away\nall of them")
    no_one = ToolContext(platform=ANN[0], chat_id=ANN[1], user_id=ANN[1], place=Place(session_key="x"))
    assert (await call_tool(board, no_one, action="create", title="t")).startswith("refused: a task needs")
    task = await board.add("big job", owner=ANN, origin=ANN_DM)
    await store.board.claim("me", 1)
    made = await call_tool(board, in_run(task.id), action="create", title="a step")  # (its owner said yes already)
    assert made.startswith("created:")

