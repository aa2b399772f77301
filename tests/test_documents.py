"""The documents port (agent.documents) the memory and skills are kept in: the same contract from files in a home
(`FolderDocuments`) and from the database (`DocumentStore`, on both engines: tests.engines); a read-modify-write
of one document by two instances on one PostgreSQL database at once loses neither's change; a name cannot lead
out of its folder, not through `..` nor through a link."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from agent.documents import BadName, Documents, FolderDocuments
from agent.memory import Memory
from gateway.storage import Store
from tests.engines import OpenStore
from tests.pg import fresh_database


@pytest.fixture(params=["folder", "sqlite", "postgres"])
async def documents(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    if request.param == "folder":
        yield FolderDocuments(tmp_path / "home")
        return
    if request.param == "sqlite":
        store = await Store.open(tmp_path / "state.db")
        try:
            yield store.documents
        finally:
            await store.close()
        return
    async with fresh_database() as url:
        store = await Store.open("", url=url)
        try:
            yield store.documents
        finally:
            await store.close()


async def test_read_write_delete_and_names(documents: Documents):
    assert await documents.read("memory/MEMORY.md") is None
    await documents.write("memory/MEMORY.md", "# Memory\n\n- ünïcode ✓\n")
    await documents.write("skills/a/SKILL.md", "a")
    await documents.write("skills/a2/SKILL.md", "a2")
    await documents.write("skills/a/scripts/run.sh", "#!/bin/sh\n")
    assert await documents.read("memory/MEMORY.md") == "# Memory\n\n- ünïcode ✓\n"
    assert await documents.names("skills/a/") == ["skills/a/SKILL.md", "skills/a/scripts/run.sh"]
    assert await documents.names("skills/a") == ["skills/a/SKILL.md", "skills/a/scripts/run.sh", "skills/a2/SKILL.md"]
    assert await documents.names("nothing/") == []
    await documents.write("memory/MEMORY.md", "replaced")
    assert await documents.read("memory/MEMORY.md") == "replaced"
    assert await documents.delete("memory/MEMORY.md") and not await documents.delete("memory/MEMORY.md")
    assert await documents.read("memory/MEMORY.md") is None


async def test_move_copy_and_delete_all_take_a_path_and_what_is_under_it(documents: Documents):
    for name in ("skills/a/SKILL.md", "skills/a/scripts/run.sh", "skills/ab/SKILL.md"):
        await documents.write(name, name)
    assert await documents.copy("skills/a", "snap/a") == 2
    assert await documents.move("skills/a/", "skills/.archive/a") == 2  # (not skills/ab: another folder)
    assert await documents.names("skills/") == ["skills/.archive/a/SKILL.md", "skills/.archive/a/scripts/run.sh",
                                                 "skills/ab/SKILL.md"]
    assert await documents.read("skills/.archive/a/scripts/run.sh") == "skills/a/scripts/run.sh"
    assert await documents.names("snap/") == ["snap/a/SKILL.md", "snap/a/scripts/run.sh"]
    assert await documents.move("skills/.archive/a/scripts/run.sh", "kept/run.sh") == 1  # one document
    assert await documents.read("kept/run.sh") == "skills/a/scripts/run.sh"
    await documents.write("skills/a/SKILL.md", "new")
    assert await documents.copy("snap/a", "skills/a") == 2  # over what is there
    assert await documents.read("skills/a/SKILL.md") == "skills/a/SKILL.md"
    assert await documents.delete_all("snap") == 2 and await documents.names("snap/") == []
    assert await documents.move("nothing", "elsewhere") == 0
    with pytest.raises(BadName):
        await documents.move("skills", "skills/inside")


@pytest.mark.parametrize("bad", ["/etc/passwd", "../config.yaml", "memory/../../config.yaml", "memory//x", "", ".",
                                 "memory/./x", "memory\\x"])
async def test_names_that_leave_the_documents_are_refused(documents: Documents, bad: str):
    with pytest.raises(BadName):
        await documents.write(bad, "x")
    with pytest.raises(BadName):
        await documents.read(bad)


async def test_update_is_a_read_modify_write_that_an_error_aborts(documents: Documents):
    assert await documents.update("memory/MEMORY.md", lambda old: (old or "") + "- one\n") == "- one\n"
    assert await documents.update("memory/MEMORY.md", lambda old: (old or "") + "- two\n") == "- one\n- two\n"

    def refuse(old: str | None) -> str:
        raise ValueError("too long")

    with pytest.raises(ValueError, match="too long"):
        await documents.update("memory/MEMORY.md", refuse)
    assert await documents.read("memory/MEMORY.md") == "- one\n- two\n"
    assert await documents.update("memory/MEMORY.md", lambda old: None) is None
    assert await documents.read("memory/MEMORY.md") is None


async def test_the_stamp_changes_with_every_change(documents: Documents):
    stamps = [await documents.stamp()]
    await documents.write("skills/a/SKILL.md", "a")
    stamps.append(await documents.stamp())
    await documents.update("skills/a/SKILL.md", lambda old: "b")
    stamps.append(await documents.stamp())
    await documents.move("skills/a", "skills/.archive/a")
    stamps.append(await documents.stamp())
    await documents.delete_all("skills/.archive/a")
    stamps.append(await documents.stamp())
    assert len(set(stamps)) == len(stamps)
    assert await documents.stamp() == stamps[-1]  # (nothing changed: the same)


async def test_the_folder_keeps_the_homes_files_and_refuses_a_link_out_of_its_folder(tmp_path: Path):
    home = tmp_path / "home"
    documents = FolderDocuments(home)
    await documents.write("memory/MEMORY.md", "# Memory\n")
    assert (home / "memory" / "MEMORY.md").read_text() == "# Memory\n"
    (home / "config.yaml").write_text("llm: {api_key: secret}\n")
    (home / "skills" / "evil" / "references").mkdir(parents=True)
    (home / "skills" / "evil" / "references" / "config.md").symlink_to(home / "config.yaml")
    (home / "memory" / "users").symlink_to(tmp_path, target_is_directory=True)
    with pytest.raises(BadName):
        await documents.read("skills/evil/references/config.md")
    with pytest.raises(BadName):
        await documents.write("memory/users/telegram-1.md", "x")
    assert not (tmp_path / "telegram-1.md").exists()
    assert await documents.names("skills/") == []  # (the link is not one of its documents)
    (home / "skills" / "by-hand").mkdir()
    before = await documents.stamp()
    (home / "skills" / "by-hand" / "SKILL.md").write_text("edited with an editor")
    assert await documents.stamp() != before  # (a person's edit: the skill index is read again)


async def test_two_instances_adding_to_one_memory_at_once_lose_nothing():
    async with fresh_database() as url:
        first, second = await Store.open("", url=url), await Store.open("", url=url)
        try:
            memories = [Memory(first.documents), Memory(second.documents)]
            notes = [f"note {n} from instance {n % 2}" for n in range(40)]
            await asyncio.gather(*(memories[n % 2].change("add", "memory", text=note) for n, note in enumerate(notes)))
            assert sorted(await memories[0].read("memory")) == sorted(notes)
            await asyncio.gather(*(memories[(n + 1) % 2].change("remove", "memory", old_text=note)
                                   for n, note in enumerate(notes[:20])))
            assert sorted(await memories[1].read("memory")) == sorted(notes[20:])
        finally:
            await second.close()
            await first.close()


async def test_each_engine_keeps_the_documents_across_a_reopen(open_store: OpenStore):
    store = await open_store()
    await store.documents.write("skills/a/SKILL.md", "kept")
    stamp = await store.documents.stamp()
    await store.close()
    again = await open_store()
    assert await again.documents.read("skills/a/SKILL.md") == "kept" and await again.documents.stamp() == stamp
