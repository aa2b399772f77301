"""An LLM error shown in a chat names no address (`llm.base_url` may hold credentials); the log shows
the address without them."""

from __future__ import annotations

import logging

import pytest

from tests.harness import Tab, free_port, start_gateway


@pytest.mark.parametrize("address", ["http://user:secret@127.0.0.1:{port}/v1",
                                     "http://127.0.0.1:{port}/v1?api-key=secret",
                                     "http://user:secret@127.0.0.1:{port}/v1?key=secret"])
async def test_the_chat_is_told_of_the_model_endpoint_never_its_address(tmp_path, caplog, address: str):
    port = free_port()  # nothing listens there
    base_url = address.format(port=port)
    caplog.set_level(logging.INFO)
    runner = await start_gateway(tmp_path, base_url, llm__max_retries="0")
    try:
        async with Tab(runner) as tab:
            await tab.say("hello?")
            reply = await tab.reply(timeout=20)
            shown = [f.get("text") or "" for f in tab.frames] + [f.get("html") or "" for f in tab.frames]
        for text in shown:
            assert "secret" not in text and f"127.0.0.1:{port}" not in text and str(port) not in text, text
        assert "secret" not in caplog.text
        assert "model endpoint" in reply and "llm.base_url" in reply  # what to check, not where it is
    finally:
        await runner.stop()
