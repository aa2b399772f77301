"""Final review: the documents port, the request body, the board.

- `FolderDocuments` read a name's top folder (`skills`, `memory`) again, through realpath, at each check: a program
  that swapped `skills` for a link to the home between the check and the use had `skills/config.yaml` pass both
  checks (the "top" was then the home itself), and the read returned the home's config, its API keys among it.
  The top folder is now where the root was resolved, fixed.
- A read opened the file a link led to before checking where it was: a FIFO there (or out of the home: a link to
  one) held the read, and with it every turn that reads memory, for ever; a device out of the home was opened as
  root. The file is now found with O_PATH (nothing opened), checked, and only then opened.
- A request's body made by pydantic-core refuses a lone surrogate (a model's `\\ud83d` escape, read by the SDK as
  one; a tool's echo of it): the turn failed with an error, and every later turn of that conversation too, since
  the history keeps it. The body then falls back to `json.dumps`, which escapes it.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from agent.documents import BadName, FolderDocuments
from agent.llm import LLMClient, LLMSettings
from tests.fakes.llm import FakeLLM, Reply
from tests.test_attack_review_38 import Racing

SECRET = "llm: {api_key: sk-secret-7c1d}\n"


async def test_a_top_folder_swapped_for_a_link_to_the_home_does_not_reach_the_homes_config(tmp_path: Path):
    home = tmp_path / "home"
    (home / "skills" / "a").mkdir(parents=True)
    (home / "config.yaml").write_text(SECRET)

    def swap(_name: str) -> None:  # (the racing program: `skills` becomes a link to the home, once)
        skills = home / "skills"
        if not skills.is_symlink():
            os.rename(skills, home / "skills.was")
            skills.symlink_to(home, target_is_directory=True)

    documents = Racing(home, swap)
    try:
        text = await documents.read("skills/config.yaml")
    except BadName:
        text = None
    assert text is None or "sk-secret" not in text
    with pytest.raises(BadName):  # (and no write lands in the home's own files that way)
        await Racing(home, lambda _n: None).write("skills/config.yaml", "llm: {base_url: http://evil}\n")
    assert (home / "config.yaml").read_text() == SECRET


async def test_a_top_folder_that_is_a_link_inside_the_home_serves_nothing(tmp_path: Path):
    home = tmp_path / "home"
    (home / "memory" / "users").mkdir(parents=True)
    (home / "memory" / "users" / "telegram-2.md").write_text("someone else's notes")
    (home / "skills").symlink_to(home / "memory", target_is_directory=True)
    with pytest.raises(BadName):
        await FolderDocuments(home).read("skills/users/telegram-2.md")


@pytest.mark.parametrize("outside", [False, True])
async def test_a_fifo_in_place_of_a_document_is_refused_without_being_opened(tmp_path: Path, outside: bool):
    home = tmp_path / "home"
    (home / "memory").mkdir(parents=True)
    fifo = (tmp_path / "pipe") if outside else (home / "memory" / "pipe")
    os.mkfifo(fifo)
    if outside:
        (home / "memory" / "MEMORY.md").symlink_to(fifo)
    name = "memory/MEMORY.md" if outside else "memory/pipe"
    reading = asyncio.ensure_future(FolderDocuments(home).read(name))
    try:  # (a read that opened the FIFO waits for a writer: it is given none before the answer is looked at)
        done, _ = await asyncio.wait([reading], timeout=5)
        assert done, "the read opened the FIFO and waits on it"
        with pytest.raises(BadName):
            reading.result()
    finally:
        if not reading.done():  # (let the blocked thread go: a writer comes and goes, the read sees the end)
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
            await reading


async def test_a_folder_still_reads_as_no_document(tmp_path: Path):
    home = tmp_path / "home"
    (home / "skills" / "a" / "SKILL.md").mkdir(parents=True)
    assert await FolderDocuments(home).read("skills/a/SKILL.md") is None


async def test_the_home_next_door_with_the_same_prefix_is_outside(tmp_path: Path):
    home, evil = tmp_path / "chatgate", tmp_path / "chatgate-evil"
    (home / "memory").mkdir(parents=True)
    evil.mkdir()
    (evil / "MEMORY.md").write_text("planted")
    (home / "memory" / "users").symlink_to(evil, target_is_directory=True)
    documents = FolderDocuments(home)
    with pytest.raises(BadName):
        await documents.read("memory/users/MEMORY.md")
    with pytest.raises(BadName):
        await documents.write("memory/users/x.md", "x")
    assert sorted(p.name for p in evil.iterdir()) == ["MEMORY.md"]


async def test_a_lone_surrogate_from_the_model_does_not_break_the_conversation(llm: FakeLLM):
    llm.script(Reply.text("half an emoji: \ud83d"), Reply.text("fine"))
    client = LLMClient(LLMSettings(model="m", base_url=llm.base_url, max_retries=0))
    tools = [{"type": "function", "function": {"name": "t", "description": "d", "parameters": {"type": "object"}}}]
    try:
        first = await client.complete([{"role": "user", "content": "hi"}], tools)
        assert first.content == "half an emoji: \ud83d"  # (the SDK reads the escape as a lone surrogate)
        history = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": first.content},
                   {"role": "tool", "tool_call_id": "c", "content": "echo \udcff"}, {"role": "user", "content": "go on"}]
        second = await client.complete(history, tools)
    finally:
        await client.aclose()
    assert second.content == "fine"
    sent = llm.requests[1]
    assert sent["messages"][1]["content"] == "half an emoji: \ud83d" and sent["tools"] == tools


async def test_a_folder_linked_out_of_the_home_is_not_walked_for_names(tmp_path: Path, monkeypatch):
    """Finding (reported by the attack review): `names("skills/x/")` with `skills/x` a link to `/` walked the whole
    file system (every name was then filtered out, but the walk could take hours)."""
    home, outside = tmp_path / "home", tmp_path / "outside"
    (home / "skills").mkdir(parents=True)
    (outside / "deep").mkdir(parents=True)
    (outside / "deep" / "SKILL.md").write_text("elsewhere")
    (home / "skills" / "x").symlink_to(outside)
    walked: list[str] = []
    real_walk = os.walk
    monkeypatch.setattr("agent.documents.os.walk", lambda top, *a, **k: walked.append(str(top)) or real_walk(top, *a, **k))
    assert await FolderDocuments(home).names("skills/x/") == []
    assert walked == []
