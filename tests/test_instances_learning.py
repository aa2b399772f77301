"""Several instances on one PostgreSQL database learn together: the memory and skills are in the database
(gateway.storage.documents), so a skill or a shared note one instance's conversation wrote is in the system prompt
of the next new session on another — also when that instance built its skill index before (no cache hides it) —
and the CLI of any instance's home sees it. No instance's home holds them as files."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from gateway import cli
from tests.fakes.llm import FakeLLM, Reply
from tests.fakes.telegram import FakeTelegram
from tests.harness import ANN, gateway_env, start_gateway, wait_for_text
from tests.instances import instance_settings, post_update, shared_database  # noqa: F401
from tests.pg import pg_url  # noqa: F401  (a fixture)

BOB, CY = 2002, 3003


def system_prompt(request: dict[str, Any]) -> str:
    return str(request["messages"][0]["content"])


def settings(tmp_path: Path, tg: FakeTelegram) -> dict[str, Any]:
    return {**instance_settings(tmp_path, tg), "access__allowed_users": f"{{telegram: [{ANN}, {BOB}, {CY}]}}",
            "access__admins": f"{{telegram: [{ANN}]}}"}


async def test_a_skill_and_a_note_written_on_one_instance_are_in_the_next_new_sessions_prompt_on_another(
        tmp_path: Path, llm: FakeLLM, tg: FakeTelegram, shared_database: str, monkeypatch, capsys):
    first = await start_gateway(tmp_path / "a", llm.base_url, **settings(tmp_path, tg))
    second = await start_gateway(tmp_path / "b", llm.base_url, **settings(tmp_path, tg))
    try:
        await post_update(tg, second, tg.user_message("hello", user_id=CY, first_name="Cy", update_id=1))
        await wait_for_text(tg, "echo: hello", timeout=10)
        assert "deploy-site" not in system_prompt(llm.requests[-1])  # (B's skill index is built, and empty)

        llm.script(Reply.tool_calls([
            ("skill_manage", {"action": "create", "name": "deploy-site", "description": "Deploy the web site",
                              "body": "1. Build.\n2. Upload with rsync."}),
            ("memory", {"action": "add", "target": "memory", "text": "The staging host is stage-7"})]),
            Reply.text("kept"))
        await post_update(tg, first, tg.user_message("remember how we deploy", update_id=2))
        await wait_for_text(tg, "kept", timeout=10)
        results = [m["content"] for m in llm.requests[-1]["messages"] if m.get("role") == "tool"]
        assert results[0] == "Created skill deploy-site." and results[1].startswith("add: done"), results

        await post_update(tg, second, tg.user_message("how do we deploy?", user_id=BOB, first_name="Bob",
                                                      update_id=3))
        await wait_for_text(tg, "echo: how do we deploy?", timeout=10)
        prompt = system_prompt(llm.requests[-1])
        assert "- deploy-site: Deploy the web site" in prompt and "The staging host is stage-7" in prompt
        assert "deploy-site" in await second.parts.learning.skills.view("deploy-site")
    finally:
        await second.stop()
        await first.stop()
    for home in (tmp_path / "a", tmp_path / "b"):
        assert not (home / "skills").exists() and not (home / "memory").exists()  # (in the database only)
    for key, value in gateway_env(tmp_path / "b", None).items():
        monkeypatch.setenv(key, value)
    assert await asyncio.to_thread(cli.main, ["skills", "show", "deploy-site"]) == 0
    assert "2. Upload with rsync." in capsys.readouterr().out
