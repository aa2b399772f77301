"""`session_search` finds the asking person's own conversations and the shared chats they are in,
never another person's direct messages (two people, one database)."""

from __future__ import annotations

from agent.tools import ToolContext
from agent.tools.builtin import session_search
from gateway.storage import Store
from platforms.base import ChatRef
from tests.engines import OpenStore


async def _talk(store: Store, key: str, chat: ChatRef, chat_type: str, user: str, text: str) -> None:
    session = await store.sessions.active(key, chat, chat_type)
    await store.sessions.commit_turn(session, [], chat, user, [{"role": "user", "content": text},
                                                     {"role": "assistant", "content": f"noted: {text}"}], None)


async def test_search_shows_own_and_shared_conversations_and_never_another_persons_dms(open_store: OpenStore):
    store = await open_store()
    await _talk(store, "telegram:ann", ChatRef("telegram", "101"), "dm", "101", "my pin kumquat annpin")
    await _talk(store, "telegram:bob", ChatRef("telegram", "202"), "dm", "202", "my pin kumquat bobpin")
    group = ChatRef("telegram", "-500")
    await _talk(store, "telegram:-500", group, "group", "202", "team kumquat teamplan friday")
    await _talk(store, "telegram:-500", group, "group", "101", "ok")
    await _talk(store, "telegram:-600", ChatRef("telegram", "-600"), "group", "202", "kumquat bobsgroup")

    def asker(user: str, platform: str = "telegram") -> ToolContext:
        return ToolContext(platform=platform, chat_id=user, user_id=user, transcripts=store.sessions)

    ann = await session_search(asker("101"), "kumquat")
    assert "annpin" in ann and "teamplan" in ann  # her DM, and the group she is in
    assert "bobpin" not in ann and "bobsgroup" not in ann
    bob = await session_search(asker("202"), "kumquat")
    assert "bobpin" in bob and "teamplan" in bob and "bobsgroup" in bob
    assert "annpin" not in bob
    assert "No past messages" in await session_search(asker("101", platform="discord"), "kumquat")
