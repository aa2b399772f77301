#!/usr/bin/env python3
"""What one context-compression pass costs the gateway: CPU and LLM requests.

A conversation of `--messages` messages (user/assistant turns with a tool exchange every few
turns, `--chars` characters each) is made to fit a window it overflows, with the real LLM client
against the in-process fake LLM (which answers the summary request at once). Printed, medians of
`--repeat` passes: the CPU of the pass (estimate, clearing, building, sending and parsing the
summary request — and the fake's side of it, which runs in the same process, so this is an upper
bound), the requests it made and the size of the request before and after. The model's own time
is not in it. It asserts nothing. Talks only to 127.0.0.1.

    .venv/bin/python bench/compression_cost.py --messages 200 --chars 800 --repeat 5
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from agent.compression import Compressor  # noqa: E402
from agent.llm import LLMClient, LLMSettings  # noqa: E402
from tests.fakes.llm import FakeLLM, Reply  # noqa: E402


def conversation(count: int, chars: int) -> list[dict]:
    messages = [{"role": "system", "content": "You are a helpful assistant."}]
    n = 0
    while len(messages) < count:
        n += 1
        messages.append({"role": "user", "content": f"question {n}: " + "q" * chars})
        if n % 4 == 0:
            call = {"id": f"c{n}", "type": "function",
                    "function": {"name": "terminal", "arguments": '{"command": "ls"}'}}
            messages += [{"role": "assistant", "content": "", "tool_calls": [call]},
                         {"role": "tool", "tool_call_id": f"c{n}", "name": "terminal", "content": "t" * chars}]
        messages.append({"role": "assistant", "content": f"answer {n}: " + "a" * chars})
    return messages


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=200)
    parser.add_argument("--chars", type=int, default=800)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    history = conversation(args.messages, args.chars)
    size = len(json.dumps(history))
    cpu, requests, after = [], [], []
    async with FakeLLM() as llm:
        llm.responder = lambda body: Reply.text("A summary of the conversation so far. " * 20)
        client = LLMClient(LLMSettings(model="bench", base_url=llm.base_url))
        try:
            for _ in range(args.repeat):
                squeeze = Compressor(client, context_window=size // 8, threshold=0.5, protect_last_n=20)
                asked = len(llm.requests)
                started = time.process_time()  # this process: the client's side and the fake's
                fitted, _ = await squeeze.fit(history)
                spent = time.process_time() - started
                cpu.append(spent)
                requests.append(len(llm.requests) - asked)
                after.append(len(json.dumps(fitted)))
        finally:
            await client.aclose()
    print(f"{args.messages} messages, {size:,} characters of JSON, window {size // 8:,} tokens (threshold 0.5)")
    print(f"  one pass: {statistics.median(cpu) * 1000:.1f} ms CPU (this process: gateway side and the fake LLM "
          f"together), {statistics.median(requests):.0f} LLM request(s), request {size:,} -> "
          f"{statistics.median(after):,.0f} characters  (medians of {args.repeat})")


if __name__ == "__main__":
    asyncio.run(main())
