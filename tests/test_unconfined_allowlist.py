"""Without a sandbox only a short read-only list runs unasked (`agent.safety.readonly_commands`): the
attacks a classifier lets through ask a person in the chat instead of running, read-only commands
on workspace files still run at once, a link out of the workspace asks, and the classifier-only
behaviour is an opt-in that the start-up log warns about. (The parser itself: test_readonly_commands.py.)"""

from __future__ import annotations

import base64
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.llm import FakeLLM, Reply
from tests.harness import Daemon, Tab, eventually, free_port, is_prompt, press, start_gateway

CONFIG = "# canary-config-7361\ngateway:\n  drain_seconds: 2\n"
NO_SANDBOX = {"agent__sandbox__mode": "off"}


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    """The default layout: the workspace inside CHATGATE_HOME (tmp_path), with a file and a script."""
    (tmp_path / "config.yaml").write_text(CONFIG)
    ws = tmp_path / "workspace"
    ws.mkdir()
    (ws / "notes.txt").write_text("hello x\n")
    (ws / "s.sh").write_text("touch pwned\n")
    (ws / "mod.py").write_text("open('pwned', 'w').close()\n")
    return ws


def git_repo(ws: Path) -> None:
    env = {**os.environ, "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1"}
    for args in (["init", "-q"], ["add", "notes.txt"],
                 ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "first"]):
        subprocess.run(["git", *args], cwd=ws, env=env, check=True, capture_output=True)


def tool_results(llm: FakeLLM) -> list[str]:
    """The results of the turn's tool calls so far, as the model got them (the last request holds them all)."""
    return [m["content"] for m in llm.requests[-1]["messages"] if m["role"] == "tool"]


def finished(text: str):
    return lambda f: f["type"] in ("message", "edit") and f.get("final") and f["text"] == text


async def ask_or_done(tab: Tab) -> dict[str, Any]:
    """The first frame that is an approval prompt or the turn's final "done" (so a command that runs
    unasked fails the test at once instead of after a timeout)."""
    return await tab.wait_for(lambda f: is_prompt(f) or finished("done")(f))


ATTACKS = [  # each would run code, write `pwned`, or print the config, if it ran
    "cat $(dirname $PWD)/config.yaml",
    "base64 ${PWD%/*}/config.yaml",
    "git -c alias.x='!touch pwned' x",
    "echo x | sed 's/.*/touch pwned/e'",
    "cat s.sh | bash",
    "python3 -m mod",
    "awk 'BEGIN { system(\"touch pwned\") }'",
    "awk 'BEGIN { \"touch pwned\" | getline }'",
    "tar -cf /dev/null --checkpoint=1 --checkpoint-action=exec='touch pwned' notes.txt",
    "tar -c -I 'touch pwned; cat' -f /dev/null notes.txt",
    "ssh -o ProxyCommand='touch pwned' -o BatchMode=yes nobody@example.invalid",
    "rsync -e 'touch pwned' notes.txt x:y",
    "make --eval='$(shell touch pwned)'",
    "vim -es -c '!touch pwned' -c q",
    "gdb -batch -ex '!touch pwned'",
    "find . -maxdepth 0 -fprintf pwned x",
    "sed -n 'w pwned' notes.txt",
    "script -qc 'touch pwned' /dev/null",
    "setpriv touch pwned",
    "prlimit touch pwned",
    "unshare -r touch pwned",
    "fakeroot touch pwned",
    "env -S 'touch pwned'",
    "git -c core.fsmonitor='touch pwned' status",
    "umount -l /nonexistent-allowlist-test",
    "grep -f ../config.yaml notes.txt",
    "sort -o pwned notes.txt",
    "git diff --ext-diff",
    "touch pwned",
]


@pytest.mark.parametrize("command", ATTACKS)
async def test_without_a_sandbox_an_unlisted_command_asks_in_the_chat_and_does_not_run(
        tmp_path: Path, ws: Path, llm: FakeLLM, command: str):
    git_repo(ws)
    llm.script(Reply.tool_calls([("terminal", {"command": command})]), Reply.text("done"))
    runner = await start_gateway(tmp_path, llm.base_url, **NO_SANDBOX)
    try:
        async with Tab(runner) as tab:
            await tab.say("go")
            prompt = await ask_or_done(tab)
            if is_prompt(prompt):
                assert "not on the read-only list" in prompt["text"] and command in prompt["text"]
                assert not (ws / "pwned").exists()  # nothing ran before the decision
                await press(tab, prompt, "Deny")
                await tab.wait_for(finished("done"))
        [result] = tool_results(llm)
        assert is_prompt(prompt) or result.startswith("refused: this command is never run"), f"ran unasked: {result}"
        assert "NOT run" in result
        assert "canary-config" not in result and base64.b64encode(CONFIG.encode()).decode()[:12] not in result
        assert not (ws / "pwned").exists()
    finally:
        await runner.stop()


async def test_without_a_sandbox_read_only_commands_on_workspace_files_run_unasked(
        tmp_path: Path, ws: Path, llm: FakeLLM):
    git_repo(ws)
    (ws / "notes.txt").write_text("hello x\nchanged\n")
    commands = ["cat notes.txt", "ls", "grep x notes.txt", "git status --short", "git diff --stat",
                "git log --oneline -n 1", "head -n 1 notes.txt | wc -l", "find . -name '*.txt'"]
    llm.script(*(Reply.tool_calls([("terminal", {"command": c})]) for c in commands),
               Reply.tool_calls([("terminal", {"command": "touch made"})]), Reply.text("done"))
    runner = await start_gateway(tmp_path, llm.base_url, **NO_SANDBOX)
    try:
        async with Tab(runner) as tab:
            await tab.say("look around")
            prompt = await ask_or_done(tab)  # the read-only ones ran; the last one (it writes) asks
            results = tool_results(llm)
            assert len(results) == len(commands) and all(r.startswith("exit code 0") for r in results), results
            assert "hello x" in results[0] and "notes.txt" in results[1] and "M notes.txt" in results[3]
            assert "first" in results[5] and "./notes.txt" in results[7]
            assert is_prompt(prompt) and "touch made" in prompt["text"]
            await press(tab, prompt, "Deny")
            await tab.wait_for(finished("done"))
        assert not (ws / "made").exists()
    finally:
        await runner.stop()


@pytest.mark.parametrize("unconfined", ["allowlist", "classifier"])
async def test_without_a_sandbox_a_link_to_chatgates_home_asks_in_either_mode(
        tmp_path: Path, ws: Path, llm: FakeLLM, unconfined: str):
    (ws / "d").symlink_to(tmp_path)  # d -> $CHATGATE_HOME: `d/config.yaml` says nothing about it as text
    (ws / "inner").mkdir()
    (ws / "inner" / "up").symlink_to("../..")
    llm.script(Reply.tool_calls([("terminal", {"command": "cat d/config.yaml"})]),
               Reply.tool_calls([("terminal", {"command": "cat inner/up/config.yaml"})]), Reply.text("done"))
    runner = await start_gateway(tmp_path, llm.base_url, agent__sandbox__unconfined=unconfined, **NO_SANDBOX)
    try:
        async with Tab(runner) as tab:
            await tab.say("read it")
            for n in (1, 2):
                prompt = await tab.wait_for(lambda f: is_prompt(f) or finished("done")(f), count=n)
                assert is_prompt(prompt), f"ran unasked: {tool_results(llm)}"
                assert "chatgate's own state" in prompt["text"] and str(tmp_path) in prompt["text"]
                await press(tab, prompt, "Deny")
            await tab.wait_for(finished("done"))
        results = tool_results(llm)
        assert len(results) == 2 and all("NOT run" in r and "canary-config" not in r for r in results)
    finally:
        await runner.stop()


async def test_the_classifier_opt_in_runs_what_it_calls_safe_and_the_start_up_log_warns(tmp_path: Path):
    async with FakeLLM() as llm:  # `chatgate run`: its log
        daemon = Daemon(tmp_path, llm, {"http__port": free_port(), "agent__sandbox__unconfined": "classifier",
                                        **NO_SANDBOX})
        try:
            daemon.start()
            log = tmp_path / "gateway-1.log"
            await eventually(lambda: log.exists() and "unconfined: classifier" in log.read_text(), 30, "the warning")
            line = next(x for x in log.read_text().splitlines() if "unconfined: classifier" in x)
            assert " WARNING " in line and "there is no sandbox here" in line
            assert "WITHOUT asking, with chatgate's own rights" in line and "awk system()" in line
        finally:
            daemon.close()
    async with FakeLLM() as llm:  # and the command itself, in a tab
        llm.script(Reply.tool_calls([("terminal", {"command": "touch made"})]), Reply.text("done"))
        runner = await start_gateway(tmp_path, llm.base_url, agent__sandbox__unconfined="classifier", **NO_SANDBOX)
        try:
            async with Tab(runner) as tab:
                await tab.say("make it")
                assert not is_prompt(await ask_or_done(tab))
            assert (tmp_path / "workspace" / "made").exists() and tool_results(llm)[0].startswith("exit code 0")
        finally:
            await runner.stop()
