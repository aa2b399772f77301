"""Context compression end to end (web chat, fake LLM): a conversation that outgrows its share of
the context window is sent smaller — head and tail word for word, tool calls with their results,
the middle summarised — the answer still arrives, the transcript stays whole; and an endpoint's
context-length refusal is met by compressing and asking once more."""

from __future__ import annotations

import json
from typing import Any

from agent.compression import SUMMARY_PREFIX
from tests.fakes.llm import FakeLLM, Reply
from tests.harness import Tab, start_gateway

SMALL = {"llm__context_window": 1024, "compression__threshold": 0.5, "compression__protect_last_n": 4,
         "review__enabled": "false"}


def size(body: dict[str, Any]) -> int:
    return len(json.dumps(body["messages"]))


def is_summary_request(body: dict[str, Any]) -> bool:
    return "tools" not in body and "Summarise in at most" in str(body["messages"][-1]["content"])


def summarise_briefly(body: dict[str, Any]) -> Reply | None:
    """The fake model's answer to a summary request (anything else: the default echo)."""
    return Reply.text("Ann shared long notes; nothing is open.") if is_summary_request(body) else None


def tool_pairs_whole(messages: list[dict[str, Any]]) -> bool:
    for i, m in enumerate(messages):
        if m["role"] == "tool":
            callers = [p for p in messages[:i] if p.get("tool_calls")]
            if not callers or m["tool_call_id"] not in {c["id"] for c in callers[-1]["tool_calls"]}:
                return False
    return True


async def test_a_growing_conversation_is_compressed_and_still_answered(tmp_path, llm: FakeLLM):
    first = "first: " + "a" * 300
    llm.responder = summarise_briefly
    runner = await start_gateway(tmp_path, llm.base_url, **SMALL)
    try:
        async with Tab(runner) as tab:
            await tab.say(first)
            await tab.reply(1)
            llm.script(Reply.tool_calls([("current_time", {"tz": "UTC"})]), Reply.text("it is late"))
            await tab.say("what time is it?")
            assert await tab.reply(2) == "it is late"
            for n in range(3, 9):
                text = f"turn {n}: " + "b" * 400
                await tab.say(text)
                assert await tab.reply(n) == f"echo: {text}"
        summaries = [b for b in llm.requests if is_summary_request(b)]
        assert summaries, "no compression happened"
        compressed = [b for b in llm.requests if not is_summary_request(b)
                      and any(str(m.get("content", "")).startswith(SUMMARY_PREFIX) for m in b["messages"])]
        assert compressed
        last = compressed[-1]["messages"]
        assert last[0]["role"] == "system" and last[1] == {"role": "user", "content": first}
        assert str(last[2]["content"]).startswith(SUMMARY_PREFIX)
        assert last[-1] == {"role": "user", "content": "turn 8: " + "b" * 400}  # the tail, word for word
        assert tool_pairs_whole(last)
        transcript = await runner.parts.store.fetch("SELECT role, content FROM messages ORDER BY id")
        full = sum(len(r["content"] or "") for r in transcript)
        assert size(compressed[-1]) < full  # smaller than the whole conversation
        assert len([r for r in transcript if r["role"] == "user"]) == 8  # the transcript stays whole
        assert await runner.parts.store.fetchrow("SELECT 1 FROM session_summaries")
        usage = await runner.parts.store.fetch("SELECT DISTINCT loop FROM llm_usage")
        assert {r["loop"] for r in usage} == {"main", "compression"}
    finally:
        await runner.stop()


async def test_unset_the_window_is_the_one_the_endpoint_states(tmp_path, llm: FakeLLM):
    llm.responder = summarise_briefly
    llm.context_lengths["fake-model"] = 1024
    settings = {k: v for k, v in SMALL.items() if k != "llm__context_window"}
    runner = await start_gateway(tmp_path, llm.base_url, llm__model="fake-model", **settings)
    try:
        async with Tab(runner) as tab:
            for n in range(1, 7):
                await tab.say(f"note {n}: " + "d" * 400)
                assert await tab.reply(n) == f"echo: note {n}: " + "d" * 400
        assert any(is_summary_request(b) for b in llm.requests)  # 1,024 tokens: compressed, as with the setting
    finally:
        await runner.stop()


async def test_a_context_length_refusal_is_compressed_and_asked_again(tmp_path, llm: FakeLLM):
    llm.responder = summarise_briefly
    runner = await start_gateway(tmp_path, llm.base_url, **{**SMALL, "llm__context_window": 100_000})
    try:
        async with Tab(runner) as tab:
            for n in range(1, 5):
                await tab.say(f"note {n}: " + "c" * 100)
                await tab.reply(n)
            asked = len(llm.requests)
            llm.script(Reply.error(400, message="This model's maximum context length is 900 tokens"))
            await tab.say("and now?")
            assert await tab.reply(5) == "echo: and now?"
        after = llm.requests[asked:]
        assert len(after) == 3 and is_summary_request(after[1])  # refused, summarised, asked again
        assert size(after[2]) < size(after[0])
        assert any(str(m.get("content", "")).startswith(SUMMARY_PREFIX) for m in after[2]["messages"])
    finally:
        await runner.stop()


class _Summarizer:
    def __init__(self) -> None:
        self.asked: list[list[dict[str, Any]]] = []

    async def complete(self, messages: list[dict[str, Any]], tools: Any = None, **kw: Any) -> Any:
        from agent.llm import Completion

        self.asked.append(messages)
        return Completion(content="short summary")


async def test_the_tail_never_starts_on_a_tool_result_and_old_results_are_cleared_first():
    from agent.compression import Compressor

    call = {"id": "c1", "type": "function", "function": {"name": "terminal", "arguments": "{}"}}
    messages = [{"role": "system", "content": "sys"}, {"role": "user", "content": "first"},
                {"role": "tool", "tool_call_id": "c0", "name": "terminal", "content": "x" * 12_000},
                {"role": "assistant", "content": "", "tool_calls": [call]},
                {"role": "tool", "tool_call_id": "c1", "name": "terminal", "content": "y" * 2000},
                {"role": "tool", "tool_call_id": "c1", "name": "terminal", "content": "z" * 2000},
                {"role": "user", "content": "next"}, {"role": "assistant", "content": "done"}]
    summarizer = _Summarizer()
    squeeze = Compressor(summarizer, context_window=1000, threshold=0.5, protect_last_n=4)  # type: ignore[arg-type]
    fitted, _ = await squeeze.fit(messages)
    assert summarizer.asked and "tools" not in summarizer.asked[0]
    assert fitted[:2] == messages[:2] and fitted[2]["content"].startswith(SUMMARY_PREFIX)
    assert fitted[3:] == messages[3:]  # the tail moved back to the call: the call and its results stay whole
    cleared = Compressor(summarizer, context_window=6000, threshold=0.5, protect_last_n=4)  # type: ignore[arg-type]
    lighter, _ = await cleared.fit(messages)
    assert lighter[2]["content"] == "[earlier tool output cleared to save context: 12,000 characters]"
    assert len(summarizer.asked) == 1  # clearing was enough: no second summary request
