"""Attack review (issue 33, 4): the read-only list's recursive reads opened what `cat` refuses.

Without a sandbox, `grep -r` over a folder and `git diff` on tracked files ran unasked and printed a
hard-linked copy of chatgate's config, which `cat` of the same file refuses (another hard link may
make it any file). Now what a recursive read will open is checked like a file named: any regular file
in it with another hard link, or anything but a regular file or a folder, makes it ask; so does a tree
too big to check first.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import agent.safety.readonly_commands as readonly
from agent.safety.readonly_commands import not_read_only
from tests.fakes.llm import FakeLLM, Reply
from tests.harness import Tab, is_prompt, press, start_gateway
from tests.test_unconfined_allowlist import CONFIG, ask_or_done, finished, git_repo, tool_results


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    """The default layout (workspace in CHATGATE_HOME) with a git repository of one tracked file."""
    (tmp_path / "config.yaml").write_text(CONFIG)
    ws = tmp_path / "workspace"
    (ws / "sub").mkdir(parents=True)
    (ws / "notes.txt").write_text("gateway notes\n")
    git_repo(ws)
    return ws


@pytest.mark.parametrize(("command", "plant"), [
    ("grep -r canary .", "sub/copy.txt"),
    ("grep -rn canary", "sub/copy.txt"),
    ("grep --recursive -h canary sub", "sub/copy.txt"),
    ("git diff", "notes.txt"),  # a tracked file swapped for another name of the config
])
async def test_a_recursive_read_over_a_hard_link_to_the_config_asks(tmp_path: Path, ws: Path, llm: FakeLLM,
                                                                   command: str, plant: str):
    if os.path.exists(ws / plant):
        os.unlink(ws / plant)
    os.link(tmp_path / "config.yaml", ws / plant)
    assert not_read_only(f"cat {plant}", ws) is not None  # (what `cat` already refused)
    llm.script(Reply.tool_calls([("terminal", {"command": command})]), Reply.text("done"))
    runner = await start_gateway(tmp_path, llm.base_url, agent__sandbox__mode="off", review__enabled="false")
    try:
        async with Tab(runner) as tab:
            await tab.say("look")
            prompt = await ask_or_done(tab)
            assert is_prompt(prompt), f"ran unasked: {tool_results(llm)}"
            assert "has other hard links" in prompt["text"]
            await press(tab, prompt, "Deny")
            await tab.wait_for(finished("done"))
        [result] = tool_results(llm)
        assert "NOT run" in result and "canary-config" not in result
    finally:
        await runner.stop()


def test_what_a_recursive_read_opens_is_checked_and_plain_trees_stay_on_the_list(tmp_path: Path, ws: Path,
                                                                                 monkeypatch):
    (ws / "sub" / "deep").mkdir()
    (ws / "sub" / "deep" / "a.txt").write_text("gateway\n")
    (ws / "sub" / "out").symlink_to(tmp_path)  # a link inside is not followed by grep -r or git: fine
    for command in ("grep -r gateway .", "grep -rn x", "grep -r x sub", "git diff", "git diff --stat",
                    "grep -c x notes.txt"):
        assert not_read_only(command, ws) is None, command
    os.mkfifo(ws / "sub" / "deep" / "pipe")
    assert "not a regular file" in not_read_only("grep -r x sub", ws)
    os.unlink(ws / "sub" / "deep" / "pipe")
    os.link(tmp_path / "config.yaml", ws / "sub" / "deep" / "b.txt")
    for command in ("grep -r x", "grep -rl x sub", "git diff"):
        assert "`sub/deep/b.txt` has other hard links" in not_read_only(command, ws), command
    for command in ("grep x notes.txt", "git diff --cached", "git log -p", "git status", "ls -R", "find ."):
        assert not_read_only(command, ws) is None, command  # they open no file of the tree but those named
    monkeypatch.setattr(readonly, "MAX_WALKED", 3)
    os.unlink(ws / "sub" / "deep" / "b.txt")
    assert "too many to check" in not_read_only("grep -r x", ws)
