"""The Telegram adapter on python-telegram-bot against the fake Bot API: PTB's errors as the
adapter contract tells them (what the outbox does next depends on it), downloads, and the
library loaded only where Telegram is configured."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import AsyncIterator

import pytest

from platforms.base import Attachment, ChatRef, DeliveryError
from platforms.base import Reply as Out
from platforms.telegram.adapter import TelegramAdapter
from tests.fakes.telegram import FakeTelegram
from tests.harness import ANN, gateway_env

CHAT = ChatRef("telegram", str(ANN))


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
async def adapter(tg: FakeTelegram) -> AsyncIterator[TelegramAdapter]:
    adapter = TelegramAdapter(tg.token, base_url=tg.url)
    await adapter.connect()
    try:
        yield adapter
    finally:
        await adapter.bot.shutdown()


async def _refusal(adapter: TelegramAdapter, text: str = "hi", chat: ChatRef = CHAT) -> DeliveryError:
    with pytest.raises(DeliveryError) as refused:
        await adapter.send(chat, Out(text=text, plain=text))
    return refused.value


async def test_connect_learns_who_the_bot_is_with_one_call(tg: FakeTelegram, adapter: TelegramAdapter):
    assert (adapter.bot_id, adapter.username) == (tg.bot_id, tg.bot_username)
    assert [c.method for c in tg.calls] == ["getMe"]


async def test_each_refusal_is_told_as_the_outbox_needs_it_and_never_shows_the_token(
        tg: FakeTelegram, adapter: TelegramAdapter):
    tg.fail_next("sendMessage", 429, retry_after=7)
    limited = await _refusal(adapter)
    assert limited.retry_after == 7.0 and limited.retryable
    assert 6 < adapter.limits.paused_for(str(ANN)) <= 7  # that chat is paused, and not called meanwhile
    assert (await _refusal(adapter)).retry_after and len(tg.calls_to("sendMessage")) == 1

    other = ChatRef("telegram", "2002")  # (Ann's chat waits out its pause)
    tg.fail_next("sendMessage", 502, description="Bad Gateway")
    down = await _refusal(adapter, chat=other)
    assert down.retryable and down.retry_after is None and str(down) == "telegram unreachable: Bad Gateway"
    tg.fail_next("sendMessage", 403, description="Forbidden: bot was blocked by the user")
    blocked = await _refusal(adapter, chat=other)
    assert not blocked.retryable and "blocked by the user" in str(blocked)
    empty = await _refusal(adapter, "", chat=other)
    assert not empty.retryable and str(empty).startswith("telegram rejected the message:") and "empty" in str(empty)

    tg.drop_next("sendMessage", after_processing=True)  # Telegram took it, the answer was lost
    ambiguous = await _refusal(adapter, "maybe", chat=other)
    assert ambiguous.retryable and ambiguous.retry_after is None and str(ambiguous).startswith("telegram unreachable")
    assert [m.text for m in tg.sent_messages(2002)] == ["maybe"]
    for error in (limited, down, blocked, empty, ambiguous):
        assert tg.token not in str(error) and tg.token.split(":")[1] not in str(error)


async def test_a_refused_token_and_no_server_are_one_line_without_the_token(tg: FakeTelegram):
    wrong = TelegramAdapter("999:NOT-THE-TOKEN", base_url=tg.url)
    with pytest.raises(RuntimeError) as refused:
        await wrong.connect()
    assert str(refused.value) == ("Telegram refused the bot token (platforms.telegram.token / "
                                  "TELEGRAM_BOT_TOKEN)") and refused.value.__cause__ is None

    nobody = TelegramAdapter(tg.token, base_url=f"http://127.0.0.1:{_closed_port()}")
    with pytest.raises(Exception) as unreachable:
        await nobody.start()
    assert "NOT-THE-TOKEN" not in str(unreachable.value) and tg.token.split(":")[1] not in str(unreachable.value)
    await nobody.stop()


async def test_a_download_over_the_limit_leaves_nothing_and_one_within_it_lands(tg: FakeTelegram, tmp_path):
    tg.add_file("big", b"x" * 300_000, "documents/big.bin")
    tg.add_file("small", b"hello", "documents/small.txt")
    adapter = TelegramAdapter(tg.token, base_url=tg.url, max_file_bytes=100_000)
    await adapter.connect()
    try:
        small = await adapter.fetch(Attachment("document", "small.txt", ref="small:7"), tmp_path / "in")
        assert small.error is None and small.size == 5 and open(small.path or "", "rb").read() == b"hello"
        big = await adapter.fetch(Attachment("document", "big.bin", ref="big:8"), tmp_path / "in")
        assert big.path is None and "limit is 0 MB" in (big.error or "")
        missing = await adapter.fetch(Attachment("document", "none.bin", ref="none:9"), tmp_path / "in")
        assert missing.path is None and "could not be downloaded" in (missing.error or "")
        assert sorted(p.name for p in (tmp_path / "in").iterdir()) == ["7-small.txt"]
    finally:
        await adapter.bot.shutdown()


def test_python_telegram_bot_is_imported_only_where_telegram_is_configured(tmp_path):
    script = ("import sys\n"
              "from gateway.config import load_config\n"
              "from gateway.runner import GatewayRunner\n"
              "from platforms.telegram.spec import SPEC\n"
              "GatewayRunner(load_config(env=dict(a.split('=', 1) for a in sys.argv[1:])))\n"
              "print('telegram' in sys.modules)")
    for telegram in (False, True):
        settings = {"platforms__telegram__token": "123:abc"} if telegram else {"platforms__webchat__enabled": "true"}
        env = gateway_env(tmp_path / str(telegram), None, **settings)
        done = subprocess.run([sys.executable, "-c", script, *(f"{k}={v}" for k, v in env.items())],
                              capture_output=True, text=True, timeout=60)
        assert done.stdout.split() == [str(telegram)], done.stderr


@pytest.mark.parametrize(("message", "thread_id", "reply_to", "mine"), [
    ({"message_thread_id": 11, "is_topic_message": True}, "11", None, True),
    ({"message_thread_id": 22, "is_topic_message": True}, "11", None, False),  # another topic's
    ({}, "11", None, False),  # the General topic's
    ({"message_thread_id": 11, "is_topic_message": True, "reply_to_message": {"message_id": 11}}, "11", "40", True),
    ({"message_thread_id": 11, "is_topic_message": True, "reply_to_message": {"message_id": 40}}, "11", "40", True),
    ({"reply_to_message": {"message_id": 41}}, None, "40", False),  # another person's answer in a group
    ({"reply_to_message": {"message_id": 41}}, None, None, False),
    ({"message_thread_id": 41}, None, "40", True),  # a reply thread of a group without topics: not a topic
    ({}, None, "40", True),  # the message it replied to was gone: sent without it
])
def test_a_reclaimed_message_is_the_sends_only_where_its_topic_and_reply_are(message, thread_id, reply_to, mine):
    from platforms.telegram.reclaim import belongs

    assert belongs(message, thread_id, reply_to) is mine
