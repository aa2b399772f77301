"""chatgate's Bot API client against the fake Telegram: what its errors say, and files."""

from __future__ import annotations

import socket

import pytest

from platforms.telegram.botapi import BotAPI, BotAPIError
from tests.fakes.telegram import FakeTelegram


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


async def test_errors_say_what_telegram_said_and_never_show_the_token(tg: FakeTelegram):
    wrong = BotAPI("999:NOT-THE-TOKEN", tg.url)
    await wrong.open()
    try:
        with pytest.raises(BotAPIError) as refused:
            await wrong.call("getMe")
        assert refused.value.status == 401 and refused.value.token_refused and not refused.value.transient
        assert "NOT-THE-TOKEN" not in str(refused.value)
    finally:
        await wrong.close()

    api = BotAPI(tg.token, tg.url)
    await api.open()
    try:
        tg.fail_next("sendMessage", 429, retry_after=7)
        with pytest.raises(BotAPIError) as limited:
            await api.call("sendMessage", {"chat_id": 1001, "text": "hi"})
        assert (limited.value.status, limited.value.retry_after) == (429, 7.0)
        tg.fail_next("sendMessage", 502, description="Bad Gateway")
        with pytest.raises(BotAPIError) as down:
            await api.call("sendMessage", {"chat_id": 1001, "text": "hi"})
        assert down.value.transient and down.value.description == "Bad Gateway"
        with pytest.raises(BotAPIError) as bad:
            await api.call("sendMessage", {"chat_id": 1001, "text": ""})
        assert bad.value.status == 400 and "text is empty" in bad.value.description
        assert await api.call("sendMessage", {"chat_id": 1001, "text": "hi", "parse_mode": None})  # None: left out
        assert "parse_mode" not in tg.calls_to("sendMessage")[-1].params
    finally:
        await api.close()

    unreachable = BotAPI(tg.token, f"http://127.0.0.1:{_closed_port()}")
    await unreachable.open()
    try:
        with pytest.raises(BotAPIError) as nobody:
            await unreachable.call("getMe")
        assert nobody.value.status == 0 and nobody.value.transient
        assert tg.token not in str(nobody.value) and tg.token.split(":")[1] not in str(nobody.value)
    finally:
        await unreachable.close()


async def test_a_download_over_the_limit_stops_and_leaves_nothing(tg: FakeTelegram, tmp_path):
    tg.add_file("big", b"x" * 300_000, "documents/big.bin")
    tg.add_file("small", b"hello", "documents/small.txt")
    api = BotAPI(tg.token, tg.url)
    await api.open()
    try:
        small = tmp_path / "small.txt"
        assert await api.download("documents/small.txt", small, 1000) == 5
        assert small.read_bytes() == b"hello"
        big = tmp_path / "big.bin"
        with pytest.raises(ValueError, match="limit"):
            await api.download("documents/big.bin", big, 100_000)
        assert not big.exists()
        with pytest.raises(BotAPIError) as missing:
            await api.download("documents/none.bin", tmp_path / "none.bin", 1000)
        assert missing.value.status == 404 and not (tmp_path / "none.bin").exists()
    finally:
        await api.close()


async def test_a_call_before_open_is_a_clear_error():
    api = BotAPI("1:x", "http://127.0.0.1:9")
    with pytest.raises(BotAPIError, match="not open"):
        await api.call("getMe")
