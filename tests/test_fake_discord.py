"""The fake Discord (REST + gateway) against the real discord.py client."""

from __future__ import annotations

import asyncio
import io
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import discord
import pytest
import yarl
from discord import app_commands

from tests.fakes.discord import ATTACHMENT_ROUTE, DEFAULT_CHANNEL, DEFAULT_GUILD, FakeDiscord

TOKEN = "fake-token"
SEND = "POST /channels/{channel_id}/messages"
CALLBACK = "POST /interactions/{interaction_id}/{interaction_token}/callback"
FOLLOWUP = "POST /webhooks/{application_id}/{interaction_token}"


def point_discord_py_at(fake: FakeDiscord, monkeypatch: pytest.MonkeyPatch) -> None:
    """The two class attributes that send discord.py to the fake (restored after the test)."""
    monkeypatch.setattr(discord.http.Route, "BASE", fake.api_base)
    monkeypatch.setattr(discord.gateway.DiscordWebSocket, "DEFAULT_GATEWAY",
                        yarl.URL(fake.gateway_url))


@pytest.fixture
async def dc(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[FakeDiscord]:
    """A started fake that discord.py points at."""
    async with FakeDiscord(token=TOKEN) as fake:
        point_discord_py_at(fake, monkeypatch)
        yield fake


def content_intents() -> discord.Intents:
    """Default intents plus the privileged MESSAGE_CONTENT one."""
    intents = discord.Intents.default()
    intents.message_content = True
    return intents


class Bot(discord.Client):
    """A client that queues what it receives (other people's messages, interactions, threads)."""

    def __init__(self, intents: discord.Intents | None = None) -> None:
        super().__init__(intents=intents or content_intents(), guild_ready_timeout=0.05)
        self.received: asyncio.Queue[discord.Message] = asyncio.Queue()
        self.interactions: asyncio.Queue[discord.Interaction] = asyncio.Queue()
        self.threads: asyncio.Queue[discord.Thread] = asyncio.Queue()
        self.resumed = asyncio.Event()

        self.identify_hooks: list[bool] = []

    async def before_identify_hook(self, shard_id: int | None, *, initial: bool = False) -> None:
        """discord.py sleeps 5 s before every IDENTIFY but the first; not in these tests."""
        self.identify_hooks.append(initial)

    async def on_message(self, message: discord.Message) -> None:
        if self.user is None or message.author.id != self.user.id:  # Discord echoes our own
            await self.received.put(message)

    async def on_interaction(self, interaction: discord.Interaction) -> None:
        await self.interactions.put(interaction)

    async def on_thread_create(self, thread: discord.Thread) -> None:
        await self.threads.put(thread)

    async def on_resumed(self) -> None:
        self.resumed.set()

    async def next_message(self) -> discord.Message:
        return await asyncio.wait_for(self.received.get(), 5)

    async def next_interaction(self) -> discord.Interaction:
        return await asyncio.wait_for(self.interactions.get(), 5)


@asynccontextmanager
async def running(bot: discord.Client) -> AsyncIterator[asyncio.Task[None]]:
    """login + connect until ready; always closed afterwards."""
    await bot.login(TOKEN)
    task = asyncio.create_task(bot.connect())
    ready = asyncio.ensure_future(bot.wait_until_ready())
    try:
        done, _ = await asyncio.wait([task, ready], timeout=5, return_when=asyncio.FIRST_COMPLETED)
        if task in done:
            task.result()  # connect() failed: raise why
        assert bot.is_ready()
        yield task
    finally:
        ready.cancel()
        await bot.close()
        await asyncio.wait_for(asyncio.gather(task, return_exceptions=True), 5)


def channel_of(bot: discord.Client, channel_id: int = DEFAULT_CHANNEL) -> discord.TextChannel:
    channel = bot.get_channel(channel_id)
    assert isinstance(channel, discord.TextChannel)
    return channel


# ------------------------------------------------------------------------------- connecting


async def test_login_connect_ready_and_guild(dc: FakeDiscord) -> None:
    bot = Bot()
    async with running(bot):
        conn = await dc.wait_connected()
        assert bot.user is not None and (bot.user.id, bot.user.name, bot.user.bot) == (
            9000, "chatgate", True)
        assert bot.application_id == 9001
        guild = bot.get_guild(DEFAULT_GUILD)
        assert guild is not None and guild.name == "Test server" and guild.me is not None
        channel = channel_of(bot)
        assert channel.name == "general" and channel.permissions_for(guild.me).send_messages
        await dc.wait_until(lambda: dc.heartbeats >= 1 and any(f.op == 11 for f in dc.frames))
    assert [c.route for c in dc.calls[:2]] == ["GET /users/@me", "GET /oauth2/applications/@me"]
    assert dc.calls[0].headers["Authorization"] == f"Bot {TOKEN}" and dc.calls[0].status == 200
    [identify] = dc.identifies
    assert identify["token"] == TOKEN and identify["intents"] == bot.intents.value
    assert (conn.number, conn.path, conn.kind) == (1, "/gateway", "identify")
    assert conn.query["v"] == "10" and conn.query["encoding"] == "json"
    assert dc.frames[0].op == 10  # HELLO
    assert [f.t for f in dc.frames if f.op == 0][:2] == ["READY", "GUILD_CREATE"]
    assert dc.resumes == [] and conn.closed and conn.close_code is not None


async def test_bad_token_is_a_login_failure(dc: FakeDiscord) -> None:
    bot = Bot()
    try:
        with pytest.raises(discord.LoginFailure):
            await bot.login("wrong-token")
    finally:
        await bot.close()
    [call] = dc.calls
    assert (call.route, call.status, call.error) == (
        "GET /users/@me", 401, {"message": "401: Unauthorized", "code": 0})


async def test_missing_message_content_intent_is_refused_with_4014(
        monkeypatch: pytest.MonkeyPatch) -> None:
    async with FakeDiscord(token=TOKEN, require_message_content=True) as fake:
        point_discord_py_at(fake, monkeypatch)
        bot = Bot(intents=discord.Intents.default())
        await bot.login(TOKEN)
        try:
            with pytest.raises(discord.PrivilegedIntentsRequired):
                await asyncio.wait_for(bot.connect(), 5)
        finally:
            await bot.close()
        assert fake.connections[0].close_code is not None and not fake.connected
        assert [f.t for f in fake.frames if f.op == 0] == []
        async with running(Bot()):  # with the intent: accepted
            assert fake.identifies[-1]["intents"] & (1 << 15)


async def test_events_injected_before_connecting_arrive_after_ready(dc: FakeDiscord) -> None:
    early = dc.user_message("sent while the bot was starting")
    bot = Bot()
    async with running(bot):
        got = await bot.next_message()
        assert got.id == int(early["id"]) and got.content == "sent while the bot was starting"
    assert [f.t for f in dc.frames if f.op == 0][:3] == ["READY", "GUILD_CREATE", "MESSAGE_CREATE"]


# ------------------------------------------------------------------------------- messages


async def test_dm_and_guild_messages_reach_on_message(dc: FakeDiscord) -> None:
    bot = Bot(intents=discord.Intents.default())  # no MESSAGE_CONTENT intent
    async with running(bot):
        dm = dc.user_message("hello")
        got = await bot.next_message()
        assert (got.id, got.content, got.author.id, got.author.name) == (
            int(dm["id"]), "hello", 1001, "ann")
        assert isinstance(got.channel, discord.DMChannel) and got.guild is None
        assert got.channel.id == dc.dm_channel_id(1001) and "guild_id" not in dm

        dc.user_message("not for you", channel_id=DEFAULT_CHANNEL, user_id=1002, username="bo")
        plain = await bot.next_message()
        assert plain.guild is not None and plain.guild.id == DEFAULT_GUILD
        assert plain.content == "" and plain.author.name == "bo"  # content needs the intent

        dc.user_message("hi bot", channel_id=DEFAULT_CHANNEL, mentions_bot=True)
        mention = await bot.next_message()
        assert mention.content == f"<@{dc.bot_id}> hi bot" and bot.user in mention.mentions
        assert isinstance(mention.author, discord.Member) and mention.channel.id == DEFAULT_CHANNEL

        # a reply to the bot pings it, so its content is visible without the intent too
        sent = await mention.channel.send("yes?")
        dc.user_message("thanks", channel_id=DEFAULT_CHANNEL, reply_to=sent.id)
        reply = await bot.next_message()
        assert reply.content == "thanks" and reply.reference is not None
        assert reply.reference.message_id == sent.id and reply.type == discord.MessageType.reply
        assert bot.user in reply.mentions
    assert len(dc.deliveries("MESSAGE_CREATE", sent.id)) == 1  # Discord echoes the bot's message


async def test_send_reply_edit_typing_fetch_and_delete(dc: FakeDiscord) -> None:
    bot = Bot()
    async with running(bot):
        channel = channel_of(bot)
        question = dc.user_message("question?", channel_id=DEFAULT_CHANNEL)
        asked = channel.get_partial_message(int(question["id"]))
        msg = await asked.reply("hello <@1001>", mention_author=False,
                                allowed_mentions=discord.AllowedMentions.none())
        [call] = dc.calls_to(SEND)
        assert call.get("allowed_mentions") == {"parse": [], "replied_user": False}
        assert call.get("message_reference")["message_id"] == int(question["id"])
        [sent] = dc.sent_messages(DEFAULT_CHANNEL)
        assert (sent.id, sent.content, sent.reply_to, sent.mentions) == (
            msg.id, "hello <@1001>", int(question["id"]), [])
        assert msg.reference is not None and msg.reference.resolved is not None
        assert msg.reference.resolved.content == "question?"  # type: ignore[union-attr]

        loud = await channel.send("hey <@1001>")
        assert dc.sent_messages()[-1].mentions == [1001] and [u.id for u in loud.mentions] == [1001]

        view = discord.ui.View()
        view.add_item(discord.ui.Button(label="Go", custom_id="go"))
        edited = await msg.edit(content="edited", view=view)
        assert edited.edited_at is not None and edited.content == "edited"
        assert sent.versions == ["hello <@1001>", "edited"] and sent.custom_ids() == ["go"]
        fetched = await channel.fetch_message(msg.id)
        assert fetched.content == "edited" and fetched.components

        await channel.typing()
        [typing] = await dc.wait_for("POST /channels/{channel_id}/typing")
        assert typing.status == 204 and typing.param("channel_id") == DEFAULT_CHANNEL

        await msg.delete()
        assert sent.deleted and dc.sent_messages() == [dc.sent_messages(include_deleted=True)[1]]
        with pytest.raises(discord.NotFound) as gone:
            await channel.fetch_message(msg.id)
        assert gone.value.code == 10008
        with pytest.raises(discord.Forbidden) as other:
            await asked.edit(content="not mine")
        assert other.value.code == 50005


async def test_message_limits_are_refused_as_discord_does(dc: FakeDiscord) -> None:
    bot = Bot()
    async with running(bot):
        channel = channel_of(bot)
        assert (await channel.send("x" * 2000)).content == "x" * 2000
        with pytest.raises(discord.HTTPException) as long:
            await channel.send("x" * 2001)
        assert (long.value.status, long.value.code) == (400, 50035)
        assert "In content: Must be 2000 or fewer in length." in str(long.value)
        with pytest.raises(discord.HTTPException) as empty:
            await channel.send("   ")
        assert (empty.value.code, empty.value.text) == (50006, "Cannot send an empty message")
        with pytest.raises(discord.HTTPException) as too_long_edit:
            await dc_sent(bot, channel).edit(content="y" * 2001)
        assert too_long_edit.value.code == 50035
        with pytest.raises(discord.HTTPException) as duplicated:
            view = discord.ui.View()
            view.add_item(discord.ui.Button(label="A", custom_id="same"))
            view.add_item(discord.ui.Button(label="B", custom_id="same"))
            await channel.send("two buttons", view=view)
        assert duplicated.value.code == 50035 and "duplicated" in str(duplicated.value)
    assert len(dc.sent_messages()) == 1


def dc_sent(bot: discord.Client, channel: discord.TextChannel) -> discord.PartialMessage:
    """The bot's last message in ``channel`` (from discord.py's cache)."""
    own = [m for m in bot.cached_messages if bot.user and m.author.id == bot.user.id]
    return channel.get_partial_message(own[-1].id)


async def test_429_with_retry_after_is_waited_out(dc: FakeDiscord) -> None:
    bot = Bot()
    async with running(bot):
        channel = channel_of(bot)
        loop = asyncio.get_running_loop()
        dc.fail_next(SEND, 429, retry_after=0.3)
        started = loop.time()
        msg = await channel.send("after the limit")
        assert loop.time() - started >= 0.3
        dc.fail_next(SEND, 429, retry_after=0.2, global_=True)
        await channel.send("after the global limit")
    statuses = [c.status for c in dc.calls_to(SEND)]
    assert statuses == [429, 200, 429, 200]
    limited = dc.calls_to(SEND)[0]
    assert limited.error == {"message": "You are being rate limited.", "retry_after": 0.3,
                             "global": False}
    assert [m.content for m in dc.sent_messages()] == ["after the limit", "after the global limit"]
    assert dc.sent_messages()[0].id == msg.id
    # discord.py retries with the same body, nonce included (Discord deduplicates on it)
    assert dc.calls_to(SEND)[0].get("nonce") == dc.calls_to(SEND)[1].get("nonce")


async def test_nonce_with_enforce_nonce_returns_the_same_message(dc: FakeDiscord) -> None:
    bot = Bot()
    async with running(bot):
        channel = channel_of(bot)
        first = await channel.send("only once", nonce="job-42")
        again = await channel.send("only once", nonce="job-42")
        other = await channel.send("only once", nonce="job-43")
    assert first.id == again.id != other.id
    assert [c.get("enforce_nonce") for c in dc.calls_to(SEND)] == [True, True, True]
    assert [c.status for c in dc.calls_to(SEND)] == [200, 200, 200]
    assert len(dc.sent_messages()) == 2


async def test_faults_status_drop_and_hold(dc: FakeDiscord) -> None:
    bot = Bot()
    async with running(bot):
        channel = channel_of(bot)
        dc.fail_next(SEND, 403)
        with pytest.raises(discord.Forbidden) as forbidden:
            await channel.send("no")
        assert forbidden.value.code == 50013
        dc.fail_next(SEND, 503)  # not one of the statuses discord.py retries
        with pytest.raises(discord.DiscordServerError):
            await channel.send("no")
        dc.drop_next(SEND)
        with pytest.raises(aiohttp.ClientError):  # not retried on Linux (ECONNRESET is 104)
            await channel.send("dropped before")
        assert dc.sent_messages() == []
        dc.drop_next(SEND, after_processing=True)
        with pytest.raises(aiohttp.ClientError):
            await channel.send("dropped after")
        assert [m.content for m in dc.sent_messages()] == ["dropped after"]  # it took effect

        dc.hold_next(SEND)
        held = asyncio.create_task(channel.send("held then abandoned"))
        await dc.wait_for(SEND, lambda c: c.status == -2)
        held.cancel()
        await dc.wait_for(SEND, lambda c: c.status == 499)
        release = dc.hold_next(SEND)
        waiting = asyncio.create_task(channel.send("held then released"))
        await dc.wait_for(SEND, lambda c: c.status == -2 and c.get("content") == "held then released")
        assert not waiting.done()
        release.set()
        assert (await asyncio.wait_for(waiting, 5)).content == "held then released"
    assert [m.content for m in dc.sent_messages()] == ["dropped after", "held then released"]


# ------------------------------------------------------------------------------- interactions


async def test_button_press_defer_followup_edit_and_late_callback(dc: FakeDiscord) -> None:
    bot = Bot()
    async with running(bot):
        channel = channel_of(bot)
        view = discord.ui.View(timeout=None)
        view.add_item(discord.ui.Button(label="Approve", custom_id="approve:1"))
        msg = await channel.send("Run it?", view=view)

        pressed = dc.button_press("approve:1", message_id=msg.id, channel_id=DEFAULT_CHANNEL)
        interaction = await bot.next_interaction()
        assert interaction.id == int(pressed["id"]) and interaction.type == discord.InteractionType.component
        assert interaction.data is not None and interaction.data["custom_id"] == "approve:1"
        assert interaction.message is not None and interaction.message.id == msg.id
        assert interaction.user.id == 1001 and interaction.guild_id == DEFAULT_GUILD
        await interaction.response.defer()  # a component's defer is type 6 (deferred update)
        note_msg = await interaction.followup.send("only you see this", ephemeral=True, wait=True)
        await note_msg.edit(content="only you see this (edited)")
        await interaction.edit_original_response(content="Approved", view=None)

        assert [(r.type, r.data) for r in dc.interaction_responses(interaction.id)] == [(6, None)]
        [followup] = dc.calls_to(FOLLOWUP)
        assert followup.get("flags") == 64 and followup.query["wait"] == "1"
        note = dc.sent_messages()[-1]
        assert (note.id, note.content, note.ephemeral, note.interaction_id) == (
            note_msg.id, "only you see this (edited)", True, interaction.id)
        [edit] = dc.calls_to("PATCH /webhooks/{application_id}/{interaction_token}/messages/{message_id}")
        assert edit.param("message_id") == note.id
        assert not dc.deliveries("MESSAGE_CREATE", note.id)  # ephemeral: not on the gateway
        original = dc.sent_messages()[0]
        assert (original.id, original.content, original.components) == (msg.id, "Approved", [])

        # acknowledging twice is refused by Discord (discord.py refuses it itself first)
        async with aiohttp.ClientSession() as http:
            url = f"{dc.api_base}/interactions/{interaction.id}/{interaction.token}/callback"
            async with http.post(url, json={"type": 6}) as resp:
                assert resp.status == 400 and (await resp.json())["code"] == 40060

        # type 7: the press updates the message it came from
        view3 = discord.ui.View(timeout=None)
        view3.add_item(discord.ui.Button(label="Stop", custom_id="stop"))
        stop_msg = await channel.send("Running", view=view3)
        dc.button_press("stop", message_id=stop_msg.id, channel_id=DEFAULT_CHANNEL, user_id=1002,
                        username="bo")
        stopping = await bot.next_interaction()
        assert stopping.user.name == "bo"
        await stopping.response.edit_message(content="Stopped", view=None)
        [update] = dc.interaction_responses(stopping.id)
        assert update.type == 7 and update.data is not None and update.data["content"] == "Stopped"
        stopped = dc.sent_messages()[-1]
        assert (stopped.id, stopped.content, stopped.components) == (stop_msg.id, "Stopped", [])
        assert stopped.versions == ["Running", "Stopped"]

        # a callback after Discord's 3 s window: 10062 Unknown interaction
        view2 = discord.ui.View(timeout=None)
        view2.add_item(discord.ui.Button(label="Again", custom_id="again"))
        again = await channel.send("Again?", view=view2)
        dc.button_press("again", message_id=again.id, channel_id=DEFAULT_CHANNEL)
        late = await bot.next_interaction()
        dc.expire_interaction(late.id)
        with pytest.raises(discord.NotFound) as expired:
            await late.response.send_message("too late")
        assert expired.value.code == 10062 and "Unknown interaction" in str(expired.value)
    # discord.py asks for the callback response (?with_response=1), so successes are 200
    assert [c.status for c in dc.calls_to(CALLBACK)] == [200, 400, 200, 404]
    assert dc.calls_to(CALLBACK)[0].query == {"with_response": "1"}
    with pytest.raises(ValueError, match="no component"):
        dc.button_press("missing", message_id=msg.id, channel_id=DEFAULT_CHANNEL)


async def test_slash_commands_sync_dispatch_and_deferred_followup(dc: FakeDiscord) -> None:
    bot = Bot()
    tree = app_commands.CommandTree(bot)
    answered = asyncio.Event()

    @tree.command(name="ask", description="Ask the agent")
    async def ask(interaction: discord.Interaction, question: str) -> None:
        await interaction.response.send_message(f"Q: {question}")
        answered.set()

    @tree.command(name="slow", description="Think first")
    async def slow(interaction: discord.Interaction) -> None:
        await interaction.response.defer(thinking=True, ephemeral=True)
        await interaction.followup.send("done thinking")

    async with running(bot):
        synced = await tree.sync()
        assert sorted(c.name for c in synced) == ["ask", "slow"]
        [put] = dc.calls_to("PUT /applications/{application_id}/commands")
        assert put.params["application_id"] == "9001" and put.ok
        assert [c["name"] for c in dc.commands] == ["ask", "slow"]
        assert dc.commands[0]["options"][0]["name"] == "question"
        ids = [c["id"] for c in dc.commands]
        await tree.sync()  # overwriting keeps the ids of commands with the same name
        assert [c["id"] for c in dc.commands] == ids
        await tree.sync(guild=discord.Object(DEFAULT_GUILD))
        assert dc.guild_commands(DEFAULT_GUILD) == []  # no guild-only commands defined

        event = dc.slash_command("ask", {"question": "why?"}, channel_id=DEFAULT_CHANNEL)
        assert event["data"]["id"] == ids[0]
        interaction = await bot.next_interaction()
        assert interaction.type == discord.InteractionType.application_command
        assert interaction.data is not None and interaction.data["options"] == [
            {"name": "question", "type": 3, "value": "why?"}]
        await asyncio.wait_for(answered.wait(), 5)
        [response] = dc.interaction_responses(interaction.id)
        assert (response.type, response.data["content"]) == (4, "Q: why?")  # type: ignore[index]
        assert dc.sent_messages()[-1].content == "Q: why?"

        dc.slash_command("slow")  # in the user's DM
        thinking = await bot.next_interaction()
        await dc.wait_for(FOLLOWUP)
        assert [r.type for r in dc.interaction_responses(thinking.id)] == [5]
        [reply] = [m for m in dc.sent_messages() if m.interaction_id == thinking.id]
        # the first follow-up after a deferral fills in the "thinking" message
        assert (reply.content, reply.loading, reply.ephemeral) == ("done thinking", False, True)
        assert reply.channel_id == dc.dm_channel_id(1001)


# ------------------------------------------------------------------------------- the gateway


async def test_request_reconnect_resumes_and_replays_exactly_once(dc: FakeDiscord) -> None:
    bot = Bot()
    async with running(bot):
        first = await dc.wait_connected()
        dc.request_reconnect()
        missed = dc.user_message("sent while reconnecting")
        got = await bot.next_message()
        assert got.id == int(missed["id"])
        resumed = await dc.wait_connected()
        await asyncio.wait_for(bot.resumed.wait(), 5)
        after = dc.user_message("after the resume")
        assert (await bot.next_message()).id == int(after["id"])  # nothing came twice before it
        assert bot.received.empty()
        assert len(dc.deliveries("MESSAGE_CREATE", missed["id"])) == 1

        dc.redeliver(missed)  # a duplicate delivery, as a glitch would cause
        duplicate = await bot.next_message()
        assert duplicate.id == got.id
    assert (first.number, resumed.number, resumed.kind, resumed.path) == (1, 2, "resume", "/resume")
    [resume] = dc.resumes
    assert resume["session_id"] == dc.dispatched[0].d["session_id"] and resume["seq"] >= 2
    assert len(dc.identifies) == 1


async def test_dropped_connection_reconnects_and_resumes(dc: FakeDiscord) -> None:
    bot = Bot()
    async with running(bot):
        await dc.wait_connected()
        dc.drop_connection()
        missed = dc.user_message("sent while the socket was down")
        assert (await bot.next_message()).id == int(missed["id"])
        await dc.wait_connected()
    assert len(dc.resumes) == 1 and len(dc.identifies) == 1 and len(dc.connections) == 2
    assert len(dc.deliveries("MESSAGE_CREATE", missed["id"])) == 1


async def test_invalid_session_identifies_again(dc: FakeDiscord) -> None:
    bot = Bot()
    async with running(bot):
        await dc.wait_connected()
        dc.invalidate_session(resumable=True)
        await asyncio.wait_for(bot.resumed.wait(), 5)
        assert len(dc.resumes) == 1 and len(dc.identifies) == 1
        dc.invalidate_session(resumable=False)
        waiting = dc.user_message("sent while the session was invalid")
        assert (await bot.next_message()).id == int(waiting["id"])
        await dc.wait_connected()
    assert len(dc.identifies) == 2 and dc.connections[-1].kind == "identify"
    assert bot.identify_hooks == [True, False]  # the default hook would have slept 5 s here
    assert dc.dispatched[-1].t == "MESSAGE_CREATE"


# ------------------------------------------------------------------------------- DMs, threads, files


async def test_create_dm_opens_the_users_dm_channel(dc: FakeDiscord) -> None:
    bot = Bot()
    async with running(bot):
        user = await bot.fetch_user(1001)
        assert user.name == "ann"
        dm = await user.create_dm()
        assert dm.id == dc.dm_channel_id(1001)
        await dm.send("a private note")
        with pytest.raises(discord.NotFound) as missing:
            await bot.fetch_user(424242)
        assert missing.value.code == 10013
    [opened] = dc.calls_to("POST /users/@me/channels")
    assert int(opened.get("recipient_id")) == 1001 and opened.result["type"] == 1
    assert [m.content for m in dc.sent_messages(dc.dm_channel_id(1001))] == ["a private note"]


async def test_threads_from_a_message_and_without_one(dc: FakeDiscord) -> None:
    bot = Bot()
    async with running(bot):
        channel = channel_of(bot)
        msg = await channel.send("Let's discuss")
        thread = await msg.create_thread(name="discussion")
        assert thread.id == msg.id and thread.parent_id == DEFAULT_CHANNEL  # Discord's rule
        created = await asyncio.wait_for(bot.threads.get(), 5)
        assert created.id == thread.id and created.name == "discussion"
        await thread.send("inside the thread")
        dc.user_message("a reply in the thread", thread_id=thread.id)
        got = await bot.next_message()
        assert isinstance(got.channel, discord.Thread) and got.channel.id == thread.id
        assert got.content == "a reply in the thread"
        with pytest.raises(discord.HTTPException) as twice:
            await msg.create_thread(name="again")
        assert twice.value.code == 160004

        side = await channel.create_thread(name="side", type=discord.ChannelType.public_thread)
        assert side.type == discord.ChannelType.public_thread and side.id != msg.id
    from_message = dc.calls_to("POST /channels/{channel_id}/messages/{message_id}/threads")
    assert [(c.get("name"), c.status) for c in from_message] == [("discussion", 200), ("again", 400)]
    assert dc.calls_to("POST /channels/{channel_id}/threads")[0].get("type") == 11
    assert [m.content for m in dc.sent_messages(thread.id)] == ["inside the thread"]
    assert dc.sent_messages(DEFAULT_CHANNEL)[0].thread_id == thread.id


async def test_attachments_both_ways(dc: FakeDiscord) -> None:
    bot = Bot()
    async with running(bot):
        dc.user_message("see file", channel_id=DEFAULT_CHANNEL,
                        attachments=[("notes.txt", b"hello file")])
        got = await bot.next_message()
        [attachment] = got.attachments
        assert (attachment.filename, attachment.size, attachment.content_type) == (
            "notes.txt", 10, "text/plain")
        assert await attachment.read() == b"hello file"
        [download] = dc.calls_to(ATTACHMENT_ROUTE)
        assert download.status == 200 and download.params["filename"] == "notes.txt"

        sent = await channel_of(bot).send(
            "the report", file=discord.File(io.BytesIO(b"# report"), filename="report.md",
                                            description="weekly"))
        assert await sent.attachments[0].read() == b"# report"
    [call] = dc.calls_to(SEND)
    assert call.get("content") == "the report" and call.files[0].filename == "report.md"
    assert call.files[0].field == "files[0]" and call.files[0].content == b"# report"
    [stored] = dc.sent_messages()[0].attachments
    assert (stored.filename, stored.content, stored.description) == ("report.md", b"# report", "weekly")


# ------------------------------------------------------------------------------- raw HTTP


async def test_raw_http_headers_errors_and_unknown_routes(dc: FakeDiscord) -> None:
    auth = {"Authorization": f"Bot {TOKEN}"}
    async with aiohttp.ClientSession(headers=auth) as http:
        async with http.get(f"{dc.api_base}/users/@me") as resp:
            assert resp.headers["Content-Type"] == "application/json"  # exactly, for discord.py
            assert (await resp.json())["id"] == "9000"
        dc.fail_next(SEND, 429, retry_after=2.5, channel_id=DEFAULT_CHANNEL)
        async with http.post(f"{dc.api_base}/channels/{DEFAULT_CHANNEL}/messages",
                             json={"content": "x"}) as resp:
            assert resp.status == 429 and resp.headers["Via"] == "1.1 google"
            assert resp.headers["Retry-After"] == "3"
            assert resp.headers["X-RateLimit-Remaining"] == "0"
            assert (await resp.json())["retry_after"] == 2.5
        async with http.post(f"{dc.api_base}/channels/{DEFAULT_CHANNEL}/messages",
                             json={"content": "x"}) as resp:
            assert resp.status == 200 and resp.headers["X-RateLimit-Remaining"] == "49"
        async with http.get(f"{dc.api_base}/no/such/route") as resp:
            assert resp.status == 404 and await resp.json() == {"message": "404: Not Found", "code": 0}
        async with http.post(f"{dc.api_base}/channels/123/messages", json={"content": "x"}) as resp:
            assert resp.status == 404 and (await resp.json())["code"] == 10003
        async with http.put(f"{dc.api_base}/applications/9001/commands",
                            json=[{"name": "Bad Name", "description": "x"}]) as resp:
            assert resp.status == 400 and (await resp.json())["code"] == 50035
    assert dc.calls[-3].route == "GET /no/such/route" and dc.calls[-3].status == 404


async def test_wait_for_timeout_lists_calls(dc: FakeDiscord) -> None:
    async with aiohttp.ClientSession() as http, http.get(f"{dc.api_base}/users/@me"):
        pass
    with pytest.raises(TimeoutError, match="(?s)POST /channels.*GET /users/@me"):
        await dc.wait_for(SEND, timeout=0.2)


def test_injection_checks_without_a_server() -> None:
    fake = FakeDiscord()
    msg = fake.user_message("hi", channel_id=DEFAULT_CHANNEL, mentions_bot=True)
    assert msg["content"] == "<@9000> hi" and msg["guild_id"] == str(DEFAULT_GUILD)
    assert msg["mentions"][0]["id"] == "9000"
    with pytest.raises(ValueError, match="reply to"):
        fake.user_message("x", reply_to=12345)
    with pytest.raises(ValueError, match="unknown thread"):
        fake.user_message("x", thread_id=12345)
    with pytest.raises(ValueError, match="not a live bot message"):
        fake.button_press("x", message_id=int(msg["id"]), channel_id=DEFAULT_CHANNEL)
    command: dict[str, Any] = fake.slash_command("ask", [{"name": "q", "type": 3, "value": "v"}])
    assert command["data"]["options"] == [{"name": "q", "type": 3, "value": "v"}]
    assert command["channel"]["type"] == 1 and command["user"]["id"] == "1001"
