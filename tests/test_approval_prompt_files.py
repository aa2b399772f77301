"""The code an approval prompt shows is only what is really in the workspace.

Without a sandbox (or outside it) a command that runs a workspace file asks, showing that file. The
file is read beneath the workspace with no link on the way, only its first few KiB: a folder linked
to chatgate's home (`ln -s $CHATGATE_HOME d; bash d/webchat-token`), a `.git/hooks` linked to a
folder of secrets, or a 300 MB sparse script must not put secrets or the whole file into the prompt
sent to the chat before anyone decides. What cannot be shown is named so, and the command still asks.
"""

from __future__ import annotations

import tracemalloc
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.llm import FakeLLM, Reply
from tests.harness import Tab, is_prompt, press, start_gateway

SECRET = "SECRET-HOOK-5be1c0"


def run(command: str, **more: Any) -> Reply:
    return Reply.tool_calls([("terminal", {"command": command, **more})])


async def prompt_for(tmp_path: Path, llm: FakeLLM, command: str, *, outside: bool = False) -> dict[str, Any]:
    """Start chatgate (no sandbox, or with one and `outside_sandbox=true`), have the agent run
    `command`, and return the approval prompt the web chat received (then deny it)."""
    llm.script(run(command, **({"outside_sandbox": True} if outside else {})), Reply.text("Not run."))
    settings = {} if outside else {"agent__sandbox__mode": "off"}
    runner = await start_gateway(tmp_path, llm.base_url, agent__workspace=tmp_path / "ws", **settings)
    try:
        async with Tab(runner) as tab:
            await tab.say("go")
            prompt = await tab.wait_for(is_prompt, timeout=15)
            await press(tab, prompt, "Deny")
            assert await tab.reply(2) == "Not run."
        return prompt
    finally:
        await runner.stop()


@pytest.mark.parametrize("outside", [False, True], ids=["no sandbox", "outside the sandbox"])
async def test_a_file_through_a_linked_folder_is_named_not_shown(tmp_path: Path, llm: FakeLLM, outside: bool):
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "d").symlink_to(tmp_path)  # the agent's `ln -s $CHATGATE_HOME d`
    (tmp_path / "webchat-token").write_text("tok-3f9a61c2d8e04b7a\n")
    prompt = await prompt_for(tmp_path, llm, "bash d/webchat-token", outside=outside)
    assert "bash d/webchat-token" in prompt["text"]
    assert "tok-3f9a61c2d8e04b7a" not in prompt["text"]
    assert "not shown: a symbolic link" in prompt["text"]
    assert (tmp_path / "webchat-token").read_text() == "tok-3f9a61c2d8e04b7a\n"  # (the token the tab used)


async def test_git_hooks_linked_to_another_folder_are_not_shown(tmp_path: Path, llm: FakeLLM):
    (tmp_path / "ws" / ".git").mkdir(parents=True)
    (tmp_path / "keys").mkdir()
    (tmp_path / "keys" / "pre-commit").write_text(f"#!/bin/sh\necho {SECRET}\n")
    (tmp_path / "ws" / ".git" / "hooks").symlink_to(tmp_path / "keys")
    prompt = await prompt_for(tmp_path, llm, "git commit -m x")
    assert SECRET not in prompt["text"]
    assert "--- .git/hooks ---" in prompt["text"] and "not shown: a symbolic link" in prompt["text"]


async def test_a_hook_that_is_a_link_is_named_and_the_others_shown(tmp_path: Path, llm: FakeLLM):
    hooks = tmp_path / "ws" / ".git" / "hooks"
    hooks.mkdir(parents=True)
    (hooks / "pre-commit").write_text("#!/bin/sh\necho checking\n")
    (tmp_path / "keys").mkdir()
    (tmp_path / "keys" / "id").write_text(SECRET)
    (hooks / "post-commit").symlink_to(tmp_path / "keys" / "id")
    prompt = await prompt_for(tmp_path, llm, "git commit -m x")
    assert SECRET not in prompt["text"]
    assert "--- .git/hooks/pre-commit ---\n#!/bin/sh\necho checking" in prompt["text"]
    assert "--- .git/hooks/post-commit ---\n[not shown: a symbolic link" in prompt["text"]


async def test_a_huge_sparse_script_is_shown_by_its_first_kib_only(tmp_path: Path, llm: FakeLLM):
    (tmp_path / "ws").mkdir()
    script = tmp_path / "ws" / "a.py"
    with open(script, "wb") as fh:
        fh.write(b"print('first line')\n" + b"x = 1\n" * 2000)
        fh.truncate(300 * 1024 * 1024)  # 300 MB, nearly all of it a hole
    tracemalloc.start()
    try:
        prompt = await prompt_for(tmp_path, llm, "python3 a.py")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert "--- a.py ---\nprint('first line')" in prompt["text"]
    assert "NOT shown" in prompt["text"] and len(prompt["text"]) < 4000
    assert peak < 40 * 1024 * 1024, f"the gateway allocated {peak:,} bytes at its peak to show a.py"
