"""The fake Slack against the real slack-sdk (AsyncWebClient) and slack-bolt (AsyncApp with
AsyncSocketModeHandler, and over HTTP through bolt's aiohttp adapter)."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from slack_bolt.adapter.aiohttp import to_aiohttp_response, to_bolt_request
from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
from slack_bolt.app.async_app import AsyncApp
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry.builtin_async_handlers import (
    AsyncConnectionErrorRetryHandler,
    AsyncRateLimitErrorRetryHandler,
)
from slack_sdk.http_retry.builtin_interval_calculators import FixedValueRetryIntervalCalculator
from slack_sdk.web.async_client import AsyncWebClient

from tests.fakes.slack import DEFAULT_CHANNEL, FakeSlack

BLOCKS = [
    {"type": "section", "block_id": "q", "text": {"type": "mrkdwn", "text": "Run `ls`?"}},
    {"type": "actions", "block_id": "choice", "elements": [
        {"type": "button", "action_id": "approve", "value": "yes",
         "text": {"type": "plain_text", "text": "Approve"}, "style": "primary"},
        {"type": "button", "action_id": "deny", "value": "no",
         "text": {"type": "plain_text", "text": "Deny"}}]},
]


@pytest.fixture
async def slack() -> AsyncIterator[FakeSlack]:
    async with FakeSlack() as fake:
        fake.redeliver_after = 0.5
        yield fake


@pytest.fixture
async def client(slack: FakeSlack) -> AsyncWebClient:
    return AsyncWebClient(token=slack.bot_token, base_url=slack.api_base)


def bolt_app(slack: FakeSlack, **kwargs: Any) -> AsyncApp:
    """An AsyncApp pointed at the fake, as an adapter would build it."""
    return AsyncApp(client=AsyncWebClient(token=slack.bot_token, base_url=slack.api_base),
                    signing_secret=slack.signing_secret, **kwargs)


@asynccontextmanager
async def socket_mode(app: AsyncApp, slack: FakeSlack) -> AsyncIterator[AsyncSocketModeHandler]:
    """Connect the real Socket Mode handler (short ping interval: quick reconnects) and close it."""
    handler = AsyncSocketModeHandler(app, slack.app_token, ping_interval=0.2)
    await handler.connect_async()
    try:
        await slack.wait_for_connections(1)
        yield handler
    finally:
        await handler.close_async()


@asynccontextmanager
async def serve(app: web.Application) -> AsyncIterator[str]:
    """Serve an aiohttp application on a loopback port; yields its base URL."""
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    await web.SockSite(runner, sock).start()
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        await runner.cleanup()


async def test_auth_post_update_delete_and_state(slack: FakeSlack, client: AsyncWebClient) -> None:
    auth = await client.auth_test()
    assert (auth["user_id"], auth["bot_id"], auth["team_id"]) == ("UBOT", "BBOT", "T0001")
    dm = (await client.conversations_open(users="U1001"))["channel"]["id"]
    assert dm == "D1001"
    posted = await client.chat_postMessage(channel=dm, text="hello", blocks=BLOCKS, mrkdwn=False)
    reply = await client.chat_postMessage(channel=dm, text="in thread", thread_ts=posted["ts"],
                                          reply_broadcast=True, unfurl_links=False)
    assert posted["message"]["bot_id"] == "BBOT" and reply["ts"] > posted["ts"]
    [call] = slack.calls_to("chat.postMessage")[:1]
    assert call.params["blocks"] == BLOCKS and call.params["mrkdwn"] is False  # a JSON body
    await client.chat_update(channel=dm, ts=posted["ts"], text="hello, edited")
    [first, second] = slack.messages(dm)
    assert (first.text, first.blocks, first.versions) == ("hello, edited", BLOCKS, ["hello", "hello, edited"])
    assert (second.thread_ts, second.reply_broadcast, second.unfurl_links) == (posted["ts"], True, False)
    assert slack.messages(dm, thread_ts=posted["ts"]) == [second]
    await client.chat_delete(channel=dm, ts=reply["ts"])
    assert [m.deleted for m in slack.messages(dm)] == [False, True]
    with pytest.raises(SlackApiError, match="message_not_found"):
        await client.chat_update(channel=dm, ts=reply["ts"], text="x")

    eph = await client.chat_postEphemeral(channel=dm, user="U1001", text="only you")
    assert slack.ephemerals[0].text == "only you" and slack.ephemerals[0].message_ts == eph["message_ts"]
    await client.assistant_threads_setStatus(channel_id=dm, thread_ts=posted["ts"], status="is thinking…")
    assert (slack.statuses[0].channel_id, slack.statuses[0].status) == (dm, "is thinking…")
    await client.reactions_add(channel=dm, timestamp=posted["ts"], name="eyes")
    assert slack.reactions == [(dm, posted["ts"], "eyes")]
    assert (await client.conversations_info(channel=dm))["channel"]["is_im"] is True  # a GET
    assert (await client.users_info(user="U1001"))["user"]["name"] == "user1001"
    history = await client.conversations_replies(channel=dm, ts=posted["ts"])
    assert [m["text"] for m in history["messages"]] == ["hello, edited"]  # the reply was deleted
    with pytest.raises(SlackApiError, match="channel_not_found"):
        await client.conversations_info(channel="C999")
    with pytest.raises(SlackApiError, match="unknown_method"):
        await client.api_call("no.such.method")


async def test_limits_auth_and_scopes(slack: FakeSlack, client: AsyncWebClient) -> None:
    await client.chat_postMessage(channel=DEFAULT_CHANNEL, text="x" * 40_000)
    with pytest.raises(SlackApiError, match="msg_too_long"):
        await client.chat_postMessage(channel=DEFAULT_CHANNEL, text="x" * 40_001)
    long_section = [{"type": "section", "text": {"type": "mrkdwn", "text": "y" * 3001}}]
    with pytest.raises(SlackApiError, match="invalid_blocks") as bad:
        await client.chat_postMessage(channel=DEFAULT_CHANNEL, text="t", blocks=long_section)
    assert "less than 3001 characters" in bad.value.response["errors"][0]
    with pytest.raises(SlackApiError, match="no_text"), pytest.warns(UserWarning, match="`text` argument"):
        await client.chat_postMessage(channel=DEFAULT_CHANNEL, text="")
    assert len(slack.messages(DEFAULT_CHANNEL)) == 1

    wrong = AsyncWebClient(token="xoxb-wrong", base_url=slack.api_base)
    with pytest.raises(SlackApiError, match="invalid_auth"):
        await wrong.auth_test()
    app_token_client = AsyncWebClient(token=slack.app_token, base_url=slack.api_base)
    with pytest.raises(SlackApiError, match="not_allowed_token_type"):
        await app_token_client.chat_postMessage(channel=DEFAULT_CHANNEL, text="x")
    with pytest.raises(SlackApiError, match="not_allowed_token_type"):
        await client.apps_connections_open(app_token=slack.bot_token)
    url = (await client.apps_connections_open(app_token=slack.app_token))["url"]
    assert url.startswith("ws://127.0.0.1:")

    async with FakeSlack(scopes={"chat:write"}) as narrow:
        limited = AsyncWebClient(token=narrow.bot_token, base_url=narrow.api_base)
        with pytest.raises(SlackApiError, match="missing_scope") as missing:
            await limited.users_info(user="U1001")
        assert (missing.value.response["needed"], missing.value.response["provided"]) == (
            "users:read", "chat:write")


async def test_rate_limit_retried_only_with_the_handler(slack: FakeSlack, client: AsyncWebClient) -> None:
    slack.fail_next("chat.postMessage", retry_after=0)
    with pytest.raises(SlackApiError, match="ratelimited") as limited:
        await client.chat_postMessage(channel="D1001", text="a")
    assert limited.value.response.status_code == 429
    assert limited.value.response.headers["Retry-After"] == "0"

    client.retry_handlers.append(AsyncRateLimitErrorRetryHandler(max_retry_count=2))
    slack.fail_next("chat.postMessage", retry_after=0)
    sent = await client.chat_postMessage(channel="D1001", text="b")
    assert [c.status for c in slack.calls_to("chat.postMessage")] == [429, 429, 200]
    assert [m.text for m in slack.messages("D1001")] == ["b"] and sent["ts"]

    slack.fail_next("chat.update", error="cant_update_message")
    with pytest.raises(SlackApiError, match="cant_update_message"):
        await client.chat_update(channel="D1001", ts=sent["ts"], text="c")
    assert slack.calls_to("chat.update")[0].status == 200


async def test_drop_and_hold(slack: FakeSlack, client: AsyncWebClient) -> None:
    # slack-sdk retries a dropped connection once by default (AsyncConnectionErrorRetryHandler,
    # with a 0.5 s+ backoff: made quicker here)
    client.retry_handlers = [AsyncConnectionErrorRetryHandler(
        interval_calculator=FixedValueRetryIntervalCalculator(0.01))]
    slack.drop_next("chat.postMessage")
    await client.chat_postMessage(channel="D1001", text="once")
    slack.drop_next("chat.postMessage", after_processing=True)
    await client.chat_postMessage(channel="D1001", text="twice")
    assert [m.text for m in slack.messages("D1001")] == ["once", "twice", "twice"]
    assert [c.status for c in slack.calls_to("chat.postMessage")] == [-1, 200, -1, 200]

    release = slack.hold_next("chat.postMessage", match=lambda c: c.get("text") == "held")
    task = asyncio.create_task(client.chat_postMessage(channel="D1001", text="held"))
    await slack.wait_for("chat.postMessage", lambda c: c.status == -2)
    assert not task.done() and len(slack.messages("D1001")) == 3
    release.set()
    assert (await task)["message"]["text"] == "held"


async def test_files_upload_v2_and_private_download(slack: FakeSlack, client: AsyncWebClient) -> None:
    posted = await client.chat_postMessage(channel=DEFAULT_CHANNEL, text="report follows")
    done = await client.files_upload_v2(channel=DEFAULT_CHANNEL, thread_ts=posted["ts"], content=b"a,b\n1,2\n",
                                        filename="report.csv", title="Report", initial_comment="here")
    assert done["file"]["name"] == "report.csv"
    [upload] = slack.uploads
    assert (upload.content, upload.title, upload.channel, upload.thread_ts, upload.initial_comment) == (
        b"a,b\n1,2\n", "Report", DEFAULT_CHANNEL, posted["ts"], "here")
    [share] = slack.messages(DEFAULT_CHANNEL, thread_ts=posted["ts"])
    assert (share.text, [f.name for f in share.files]) == ("here", ["report.csv"])
    assert [c.method for c in slack.calls] == ["chat.postMessage", "files.getUploadURLExternal",
                                               "file_upload", "files.completeUploadExternal"]

    event = slack.user_message("see attached", files=[("notes.txt", b"secret notes")], deliver="none")
    file = event["event"]["files"][0]
    assert event["event"]["subtype"] == "file_share"
    async with aiohttp.ClientSession() as http:
        for url in (file["url_private"], file["url_private_download"]):
            async with http.get(url, headers={"Authorization": f"Bearer {slack.bot_token}"}) as resp:
                assert (resp.status, await resp.read()) == (200, b"secret notes")
        async with http.get(file["url_private"]) as resp:
            assert resp.status == 403
        async with http.get(file["url_private"], headers={"Authorization": "Bearer xoxb-wrong"}) as resp:
            assert resp.status == 403


async def test_socket_mode_message_is_handled_and_acked(slack: FakeSlack) -> None:
    app = bolt_app(slack)
    got: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

    @app.event("message")
    async def on_message(event: dict[str, Any], say: Any) -> None:
        await got.put(event)
        await say(text=f"echo: {event['text']}", thread_ts=event["ts"])

    early = slack.user_message("sent before the app connected")  # queued until a connection opens
    assert slack.calls == []  # auth.test is lazy: nothing yet
    async with socket_mode(app, slack):
        ack = await slack.wait_for_ack(early)
        assert ack.payload is None and ack.retry_attempt == 0
        payload = slack.user_message("hello there", channel="C0001", thread_ts=None)
        event = await asyncio.wait_for(got.get(), 5)
        event = await asyncio.wait_for(got.get(), 5)
        assert (event["text"], event["channel"], event["channel_type"]) == ("hello there", "C0001", "channel")
        await slack.wait_for_ack(payload)
        await slack.wait_for("chat.postMessage", count=2)
    assert [c.method for c in slack.calls[:2]] == ["apps.connections.open", "auth.test"]
    assert len(slack.calls_to("auth.test")) == 1  # cached by bolt after the first request
    assert [m.text for m in slack.messages("C0001")] == ["echo: hello there"]
    assert slack.messages("C0001")[0].thread_ts == payload["event"]["ts"]


async def test_mention_delivers_message_and_app_mention(slack: FakeSlack) -> None:
    app = bolt_app(slack)
    seen: asyncio.Queue[tuple[str, str]] = asyncio.Queue()

    @app.event("message")
    async def on_message(event: dict[str, Any]) -> None:
        await seen.put(("message", event["text"]))

    @app.event("app_mention")
    async def on_mention(event: dict[str, Any]) -> None:
        await seen.put(("app_mention", event["text"]))

    async with socket_mode(app, slack):
        message = slack.user_message("help", channel_type="channel", mention=True)
        mention = slack.last_payloads[1]
        got = {await asyncio.wait_for(seen.get(), 5), await asyncio.wait_for(seen.get(), 5)}
        assert got == {("message", "<@UBOT> help"), ("app_mention", "<@UBOT> help")}
        await slack.wait_for_ack(message)
        await slack.wait_for_ack(mention)
    assert message["event"]["ts"] == mention["event"]["ts"]
    assert message["event_id"] != mention["event_id"]
    assert message["event"]["blocks"][0]["elements"][0]["elements"][0] == {"type": "user", "user_id": "UBOT"}
    in_dm = slack.user_message("hi", mention=True, deliver="none")  # Slack sends no app_mention in DMs
    assert [p["event"]["type"] for p in slack.last_payloads] == ["message"]
    assert in_dm["event"]["text"] == "<@UBOT> hi" and in_dm["event"]["channel_type"] == "im"


async def test_unacked_envelope_is_redelivered_with_retry_attempt(slack: FakeSlack) -> None:
    app = bolt_app(slack)
    retry_nums: list[str] = []

    @app.middleware
    async def first_delivery_fails(request: AsyncBoltRequest, next: Any) -> Any:
        retry_nums.append(request.headers.get("x-slack-retry-num", ["-"])[0])
        if len(retry_nums) > 1:  # bolt sends no ack unless a listener ran (404 otherwise)
            return await next()

    @app.event("message")
    async def on_message() -> None:
        pass

    async with socket_mode(app, slack):
        payload = slack.user_message("are you there?")
        ack = await slack.wait_for_ack(payload)
    env = slack.envelope_of(payload)
    assert (ack.retry_attempt, env.retry_reason, env.deliveries) == (1, "timeout", 2)
    assert retry_nums == ["0", "1"]  # bolt mirrors retry_attempt as x-slack-retry-num, even 0


async def test_socket_protocol_retries_three_times_then_gives_up(slack: FakeSlack) -> None:
    slack.redeliver_after = 0.05
    url = (await AsyncWebClient(base_url=slack.api_base).apps_connections_open(app_token=slack.app_token))["url"]
    async with aiohttp.ClientSession() as http, http.ws_connect(url) as ws:
        assert (await ws.receive_json(timeout=5))["type"] == "hello"
        payload = slack.user_message("anyone?")
        seen = [await ws.receive_json(timeout=5) for _ in range(4)]
        assert [(m["retry_attempt"], m["retry_reason"]) for m in seen] == [
            (0, ""), (1, "timeout"), (2, "timeout"), (3, "timeout")]
        assert {m["envelope_id"] for m in seen} == {slack.envelope_of(payload).envelope_id}
        assert seen[0]["type"] == "events_api" and seen[0]["payload"] == payload
        with pytest.raises(TimeoutError):  # no fifth delivery
            await ws.receive_json(timeout=0.3)
        assert slack.envelope_of(payload).given_up and slack.pending_envelopes

        command = slack.slash_command("/ask", "x")
        envelope = await ws.receive_json(timeout=5)
        assert (envelope["type"], envelope["accepts_response_payload"]) == ("slash_commands", True)
        await ws.send_json({"envelope_id": envelope["envelope_id"], "payload": {"text": "ok"}})
        ack = await slack.wait_for_ack(command)
        assert ack.payload == {"text": "ok"} and slack.envelope_of(command).acked


async def test_disconnect_and_dropped_connection_reconnect(slack: FakeSlack) -> None:
    app = bolt_app(slack)
    texts: asyncio.Queue[str] = asyncio.Queue()

    @app.event("message")
    async def on_message(event: dict[str, Any]) -> None:
        await texts.put(event["text"])

    async with socket_mode(app, slack):
        await slack.disconnect()
        queued = slack.user_message("after refresh")  # sent on the new connection
        assert await asyncio.wait_for(texts.get(), 5) == "after refresh"
        await slack.wait_for_ack(queued)
        assert slack.connections == 2 and len(slack.calls_to("apps.connections.open")) == 2
        assert slack.open_connections == 1  # the client closed the old one before opening the new

        slack.drop_connection()
        slack.user_message("after drop")
        assert await asyncio.wait_for(texts.get(), 5) == "after drop"
        assert slack.connections == 3
        assert slack.envelope_of(slack.last_payloads[0]).deliveries == 1


async def test_button_press_reaches_action_handler(slack: FakeSlack) -> None:
    app = bolt_app(slack)

    @app.action("approve")
    async def on_approve(ack: Any, body: dict[str, Any], action: dict[str, Any], respond: Any) -> None:
        await ack()
        await respond(replace_original=True, text=f"approved by <@{body['user']['id']}> ({action['value']})")

    @app.command("/ask")
    async def on_ask(ack: Any, command: dict[str, Any]) -> None:
        await ack(text=f"asked: {command['text']}")

    client = AsyncWebClient(token=slack.bot_token, base_url=slack.api_base)
    posted = await client.chat_postMessage(channel="D1001", text="Run ls?", blocks=BLOCKS)
    async with socket_mode(app, slack):
        press = slack.button_press("approve", message_ts=posted["ts"], channel="D1001")
        await slack.wait_for_ack(press)
        [response] = await slack.wait_for("response_url")
        command = slack.slash_command("/ask", "why?")
        ack = await slack.wait_for_ack(command)
    assert press["actions"][0] | {"action_ts": "-"} == {
        "type": "button", "action_id": "approve", "block_id": "choice", "value": "yes", "action_ts": "-",
        "text": {"type": "plain_text", "text": "Approve"}, "style": "primary"}
    assert press["message"]["blocks"] == BLOCKS and press["container"]["message_ts"] == posted["ts"]
    assert response.params["replace_original"] is True
    [message] = slack.messages("D1001")
    assert message.text == "approved by <@U1001> (yes)" and slack.responses[0].replace_original
    assert ack.payload == {"text": "asked: why?"}
    with pytest.raises(LookupError):
        slack.button_press("nope", message_ts=posted["ts"], channel="D1001")


async def test_http_mode_signed_events_on_an_existing_aiohttp_app(slack: FakeSlack) -> None:
    app = bolt_app(slack)
    got: asyncio.Queue[tuple[str, str | None]] = asyncio.Queue()

    @app.event("message")
    async def on_message(event: dict[str, Any], context: Any, request: AsyncBoltRequest) -> None:
        await got.put((event["text"], request.headers.get("x-slack-retry-num", [None])[0]))

    @app.action("deny")
    async def on_deny(ack: Any) -> None:
        await ack()
        await got.put(("denied", None))

    @app.command("/ask")
    async def on_ask(ack: Any, command: dict[str, Any]) -> None:
        await ack(f"asked: {command['text']}")

    async def slack_events(request: web.Request) -> web.Response:
        return await to_aiohttp_response(await app.async_dispatch(await to_bolt_request(request)))

    web_app = web.Application()  # the daemon's own aiohttp application, with bolt on one route
    web_app.router.add_post("/slack/events", slack_events)
    async with serve(web_app) as base:
        url = f"{base}/slack/events"
        status, body = await slack.url_verification(url)
        assert status == 200 and json.loads(body) == {"challenge": slack.last_challenge}
        payload = slack.user_message("over http", deliver="none")
        assert slack.envelopes == []  # built only
        assert (await slack.post_event(url, payload))[0] == 200
        assert await asyncio.wait_for(got.get(), 5) == ("over http", None)
        assert (await slack.post_event(url, payload, retry_num=1))[0] == 200
        assert await asyncio.wait_for(got.get(), 5) == ("over http", "1")
        status, body = await slack.post_event(url, payload, signed=False)
        assert status == 401 and got.empty()
        assert (await slack.post_event(url, payload, secret="other-secret"))[0] == 401

        client = AsyncWebClient(token=slack.bot_token, base_url=slack.api_base)
        posted = await client.chat_postMessage(channel="D1001", text="?", blocks=BLOCKS)
        press = slack.button_press("deny", message_ts=posted["ts"], channel="D1001", deliver="none")
        assert (await slack.post_interaction(url, press))[0] == 200
        assert await asyncio.wait_for(got.get(), 5) == ("denied", None)
        status, body = await slack.post_command(url, slack.slash_command("/ask", "why?", deliver="none"))
        assert (status, body) == (200, "asked: why?")
    assert len(slack.calls_to("auth.test")) == 1


async def test_wait_for_timeout_lists_calls(slack: FakeSlack, client: AsyncWebClient) -> None:
    await client.auth_test()
    with pytest.raises(TimeoutError, match=r"(?s)chat.postMessage.*auth.test"):
        await slack.wait_for("chat.postMessage", timeout=0.1)
    logging.getLogger(__name__).debug("calls: %s", slack.calls)
