"""The command registry: a command is one registered handler, and the session's worker runs a queued
command's handler and an ordinary message's turn in order, with nothing between them."""

from __future__ import annotations

import asyncio

from gateway.chat.commands import Answer, Registry
from gateway.chat.sessions import Sessions, SessionWorker, WorkItem
from platforms.base import InboundMessage


def message(text: str) -> InboundMessage:
    return InboundMessage(platform="telegram", chat_id="100", chat_type="dm", user_id="1", text=text, message_id="m1")


async def test_adding_a_command_is_one_registration() -> None:
    """Its parse, its place in the menu and in the help all come from the one registration."""
    registry: Registry[str] = Registry()

    @registry.command("ping", "answer pong", at_once=True)
    async def ping(call: str) -> Answer:
        return Answer(f"pong to {call}")

    command = registry.parse("/PING@my_bot  now ")
    assert command is not None and command.known and command.immediate and command.throttled
    assert command.args == "now"
    assert command.spec is not None and (await command.spec.handler("ann")).text == "pong to ann"
    assert registry.menu() == {"ping": "answer pong"}
    assert registry.help_text() == "Commands:\n/ping — answer pong"
    unknown = registry.parse("/pong")
    assert unknown is not None and not unknown.known and unknown.immediate


async def test_the_worker_runs_a_turn_or_the_queued_command_in_order() -> None:
    registry: Registry[str] = Registry()

    @registry.command("new", "start afresh", at_once=False)
    async def new(call: str) -> Answer:
        return Answer("fresh")

    ran: list[tuple[str, str]] = []
    done = asyncio.Event()

    def record(what: str, text: str) -> None:
        ran.append((what, text))
        if len(ran) == 3:
            done.set()

    async def turn(worker: SessionWorker, item: WorkItem) -> None:
        assert item.command is None
        record("turn", item.msg.text)

    async def command(worker: SessionWorker, item: WorkItem) -> None:
        assert item.command is not None and item.command.spec is not None
        record("command", (await item.command.spec.handler(item.msg.text)).text)

    sessions = Sessions(idle_seconds=5.0)
    sessions.serve(turn, command)
    worker = sessions.worker("telegram:100")
    for inbox_id, text in enumerate(["hello", "/new", "what is /new?"]):
        worker.submit(WorkItem(inbox_id, worker.key, message(text), command=registry.parse(text)))
    await asyncio.wait_for(done.wait(), 5.0)
    assert ran == [("turn", "hello"), ("command", "fresh"), ("turn", "what is /new?")]
    await sessions.drain(1.0)
