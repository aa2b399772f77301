"""The agent loop: stream a completion, run the tool calls it asks for, repeat until it answers.

Each time the loop waits on the model (a completion with its retries and pauses, or compressing
the conversation first) it waits at most `LLMSettings.turn_timeout` seconds, and each piece of the
answer that streams in gives it that long again; then the turn ends with an `LLMError` telling the
person the model did not answer in time. Tool calls and approvals are not bounded by it: a long
turn that keeps working is not cut short, a model that stalls is.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field, replace
from typing import Any, Awaitable, Callable

from agent.compression import Compressor, is_context_overflow
from agent.llm import Callback, Completion, LLMClient, LLMError, TextSink
from agent.tools import ToolContext, ToolScope

SteerSource = Callable[[ToolContext], tuple[list[str], ToolContext]]  # (the messages, the context from now on)
SummarySink = Callable[[str, int], Awaitable[None]]  # (summary, index in history of the last message it covers)


@dataclass(slots=True)
class TurnResult:
    text: str
    messages: list[dict[str, Any]] = field(default_factory=list)  # everything the turn added, in order
    iterations: int = 0
    tool_calls: int = 0
    exhausted: bool = False  # it ran out of iterations before it answered
    ended: bool = False  # a tool ended it (`TurnShare.ended`)


class Agent:
    def __init__(self, llm: LLMClient, *, identity: str, max_iterations: int = 60,
                 compressor: Compressor | None = None) -> None:
        self.llm = llm
        self.identity = identity
        self.max_iterations = max_iterations
        self.compressor = compressor

    async def run_turn(self, history: list[dict[str, Any]], user_text: str, tools: ToolScope, ctx: ToolContext, *,
                       record: list[dict[str, Any]] | None = None, context: str = "",
                       on_text: TextSink | None = None, on_restart: Callback | None = None,
                       steer: SteerSource | None = None,
                       on_tool: Callable[[str, str], None] | None = None,
                       on_summary: SummarySink | None = None) -> TurnResult:
        """Answer one user message.

        Every message the turn adds is appended to `record` as soon as it exists, so a caller
        that cancels the turn still knows what happened. Tool calls of one step run
        concurrently; their results are appended in call order. `steer` is polled after each
        tool step for messages the user sent meanwhile, and gives the context the turn's calls act
        under from then on (another person's words may lower it). `on_tool(name, arguments)` hears of each
        tool call as it starts (for a person watching: "running terminal …"). With a compressor,
        each request is made to fit the context window first (`agent.compression`), and an
        endpoint that still refuses it for its length gets it compressed once more; `on_summary`
        hears of a new summary and which of `history` it replaces.
        """
        added = record if record is not None else []
        ctx = replace(ctx, tools=tools)  # (what a subagent of this run may use at most)
        system = self.identity + (f"\n\n{context}" if context else "")
        messages = [{"role": "system", "content": system}, *history]

        def add(message: dict[str, Any]) -> None:
            messages.append(message)
            added.append(message)

        add({"role": "user", "content": user_text})
        schemas = tools.schemas()
        calls_made = 0
        compressed = False

        async def summarised(summary: str, covered: int) -> None:
            nonlocal compressed
            if on_summary is not None and not compressed:  # (positions match `history` until then)
                first_user = next(i for i, m in enumerate(messages) if m["role"] == "user")
                await on_summary(summary, min(first_user - 1 + covered, len(history) - 1))
            compressed = True

        async def request() -> Completion:
            return await self.llm.within(lambda progress, deadline: self.llm.complete(
                messages, schemas, on_text=on_text, on_restart=on_restart, on_progress=progress, deadline=deadline))

        async def ask() -> Completion:
            squeeze = self.compressor
            if squeeze is None:
                return await request()
            messages[:], chars = await self.llm.within(lambda *_: squeeze.fit(messages, on_summary=summarised))
            try:
                reply = await request()
            except LLMError as exc:
                if not is_context_overflow(exc.__cause__ or exc):
                    raise
                messages[:], chars = await self.llm.within(
                    lambda *_: squeeze.fit(messages, force=True, on_summary=summarised))
                reply = await request()
            squeeze.observe(chars, reply.usage)
            return reply

        for iteration in range(1, self.max_iterations + 1):
            reply = await ask()
            if not reply.tool_calls:
                add({"role": "assistant", "content": reply.content})
                return TurnResult(reply.content, added, iteration, calls_made)
            await _tool_step(reply, tools, ctx, add, on_tool)
            calls_made += len(reply.tool_calls)
            if ctx.turn.ended is not None:  # a tool ended the turn: its words are the answer
                add({"role": "assistant", "content": ctx.turn.ended})
                return TurnResult(ctx.turn.ended, added, iteration, calls_made, ended=True)
            if steer is not None:
                texts, ctx = steer(ctx)
                for text in texts:
                    add({"role": "user", "content": text})
        text = (f"I stopped after {self.max_iterations} steps without finishing. "
                "Tell me how to continue, or narrow the request.")
        add({"role": "assistant", "content": text})
        return TurnResult(text, added, self.max_iterations, calls_made, exhausted=True)


async def _tool_step(reply: Completion, tools: ToolScope, ctx: ToolContext,
                     add: Callable[[dict[str, Any]], None], on_tool: Callable[[str, str], None] | None) -> None:
    """The model's tool calls: recorded as asked, run concurrently, their results added in call order."""
    add({"role": "assistant", "content": reply.content or "",
         "tool_calls": [{"id": c.id, "type": "function",
                         "function": {"name": c.name, "arguments": c.arguments}} for c in reply.tool_calls]})
    for call in reply.tool_calls if on_tool else ():
        on_tool(call.name, call.arguments)
    results = await asyncio.gather(*(tools.call(c.name, c.arguments, ctx) for c in reply.tool_calls))
    for call, result in zip(reply.tool_calls, results):
        add({"role": "tool", "tool_call_id": call.id, "name": call.name, "content": result})
