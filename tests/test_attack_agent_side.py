"""Attacks on the agent's side, by someone who controls every tool call the model makes, each
through chatgate as a user runs it (the web chat, fakes over loopback) where a person would see it:

- as root, the sandbox wrote kernel settings (`/proc/sys`): `kernel.core_pattern` set to
  `|workspace/x.sh` has the kernel run x.sh as root outside the sandbox on the next crash;
- a script shown in an approval prompt was changed after it was shown (by a tool call of the same
  step, or another chat's turn: a sandboxed command or `write_file`), and the changed code ran
  unconfined once the person said yes; "allow for this session" covered a script changed past the
  2,500 bytes its prompt showed (and a write past the 3,000 characters of its diff);
- forty `send_file` calls in one step all passed the "10 files" check before any copy was counted:
  every call copied the file (50 MB each) into chatgate's home, most never sent nor removed;
- the read-only list ran `tail +1f` (the old spelling of `tail -f`: it waits for ever), `cat fifo`,
  and `cat "\\$/x"` (checked as `\\$/x`, read by bash through a link named `$`);
- a prompt for a git command did not show the code git would run when `.git` is a `gitdir:` file
  or the config names a credential helper, and showed a script that is a hard link to a secret;
- `write_file` of `.git`, `.git/commondir` (which send git to another folder's config) did not ask;
  a rewrite kept a setuid bit; one `patch_file` made a 1.9 GB string; the diff of a 30,000-line
  write to `.envrc` held the event loop for minutes; a NUL or a 400 KB path was no clear error.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from agent.safety.sandbox import Sandbox
from agent.tools import ToolContext
from agent.tools.system import system_tools
from agent.safety.workspace_gate import WorkspaceGate
from tests.fakes.llm import FakeLLM, Reply
from tests.harness import Approver, Tab, eventually, is_prompt, press, start_gateway

CANARY = "canary-config-90d1"
CONFIG = f"# {CANARY}\ngateway:\n  drain_seconds: 2\n"
OFF = {"agent__sandbox__mode": "off"}


def tool_results(llm: FakeLLM) -> list[str]:
    """Each tool result the model was given, once (a request repeats the ones before it)."""
    return list(dict.fromkeys(m["content"] for r in llm.requests for m in r["messages"] if m["role"] == "tool"))


def last_results(llm: FakeLLM) -> list[str]:
    """The tool results of the latest request: every result of that turn, repeats included."""
    return [m["content"] for m in llm.requests[-1]["messages"] if m["role"] == "tool"]


def finished(text: str):
    return lambda f: f["type"] in ("message", "edit") and f.get("final") and f["text"] == text


def home_with_workspace(tmp_path: Path) -> Path:
    (tmp_path / "config.yaml").write_text(CONFIG)
    ws = tmp_path / "workspace"
    ws.mkdir()
    return ws


async def first_prompt_or(tab: Tab, text: str) -> dict[str, Any]:
    return await tab.wait_for(lambda f: is_prompt(f) or finished(text)(f), timeout=20)


def bwrap_works() -> bool:
    return Sandbox("auto").active


# -- the sandbox, as root ----------------------------------------------------------------------------


@pytest.mark.skipif(os.geteuid() != 0, reason="only root may write /proc/sys at all")
async def test_as_root_a_sandboxed_command_cannot_write_kernel_settings(tmp_path: Path, llm: FakeLLM):
    if not bwrap_works():
        pytest.skip("bubblewrap does not work here")
    home_with_workspace(tmp_path)
    # the same value back: harmless, but a write all the same (core_pattern would be the escape)
    command = ("cd /proc/sys/kernel && read v < printk_ratelimit_burst && echo $v > printk_ratelimit_burst "
               "&& echo WROTE-SYSCTL")
    llm.script(Reply.tool_calls([("terminal", {"command": command})]), Reply.text("done"))
    runner = await start_gateway(tmp_path, llm.base_url)
    try:
        assert runner.parts.sandbox.active
        async with Tab(runner) as tab:
            await tab.say("tune it")
            frame = await first_prompt_or(tab, "done")
            if is_prompt(frame):  # (a person's yes to a sandboxed command must not reach the kernel either)
                await press(tab, frame, "Allow once")
                await tab.wait_for(finished("done"), timeout=20)
        [result] = tool_results(llm)
        assert "WROTE-SYSCTL" not in result and "Read-only file system" in result, result
    finally:
        await runner.stop()


# -- what a person was shown is what runs ------------------------------------------------------------


@pytest.mark.parametrize("mode", ["off", "auto"], ids=["no sandbox, write_file", "sandboxed command"])
async def test_a_script_changed_after_the_prompt_is_not_run(tmp_path: Path, llm: FakeLLM, mode: str):
    if mode == "auto" and not bwrap_works():
        pytest.skip("bubblewrap does not work here")
    ws = home_with_workspace(tmp_path)
    (ws / "run.sh").write_text("echo hello\n")
    evil = "cat ../config.yaml > stolen.txt\n"
    if mode == "off":  # another chat's agent: write_file runs unasked
        edit = Reply.tool_calls([("write_file", {"path": "run.sh", "content": evil})])
        ask = Reply.tool_calls([("terminal", {"command": "bash run.sh"})])
    else:  # …or a sandboxed command, harmless to the classifier; the run asks to leave the sandbox
        edit = Reply.tool_calls([("terminal", {"command": f"printf '{evil.strip()}\\n' > run.sh"})])
        ask = Reply.tool_calls([("terminal", {"command": "bash run.sh", "outside_sandbox": True})])
    llm.script(ask, edit, Reply.text("edited"), Reply.text("done"))
    runner = await start_gateway(tmp_path, llm.base_url, agent__sandbox__mode=mode)
    try:
        async with Tab(runner) as owner, Tab(runner) as other:
            await owner.say("run my script")
            prompt = await owner.wait_for(is_prompt, timeout=20)
            assert "--- run.sh ---\necho hello" in prompt["text"]
            await other.say("edit the script")
            assert await other.reply(timeout=20) == "edited"
            assert (ws / "run.sh").read_text() == evil  # changed after the prompt, before the yes
            await press(owner, prompt, "Allow once")
            await owner.wait_for(finished("done"), timeout=20)
        [ran] = last_results(llm)  # (the last request is the owner's, after the yes)
        assert "changed after the person was asked" in ran and "NOT run" in ran, ran
        assert not (ws / "stolen.txt").exists()
        assert all(CANARY not in r for r in tool_results(llm))
    finally:
        await runner.stop()


async def test_the_gate_lets_no_change_in_while_an_unconfined_command_is_judged_or_runs():
    gate = WorkspaceGate()
    order: list[str] = []

    async def change(name: str) -> None:
        async with gate.shared():
            order.append(name)

    async with gate.exclusive():
        writer = asyncio.create_task(change("write"))
        await asyncio.sleep(0)
        assert order == []  # held off while the command is checked and runs
    await writer
    assert order == ["write"]
    async with gate.shared():  # a queued exclusive holder that is cancelled lets the others on
        waiting = asyncio.create_task(gate.exclusive().__aenter__())
        await asyncio.sleep(0)
        later = asyncio.create_task(change("later"))
        await asyncio.sleep(0)
        assert order == ["write"]  # new shared holders wait behind a queued exclusive one
        waiting.cancel()
        await asyncio.gather(waiting, return_exceptions=True)
        await later
    assert order == ["write", "later"]


async def test_a_session_grant_does_not_cover_a_script_changed_past_what_the_prompt_showed(tmp_path: Path,
                                                                                          llm: FakeLLM):
    ws = home_with_workspace(tmp_path)
    build = "echo building\n" + "#" * 3000 + "\n"  # longer than a prompt shows
    tail = "\ncat ../config.yaml > stolen.txt #"
    evil = build[:2900] + tail + build[2900 + len(tail):]  # the same size, the same first 2,900 bytes
    assert len(evil) == len(build)
    (ws / "build.sh").write_text(build)
    run = Reply.tool_calls([("terminal", {"command": "bash build.sh"})])
    llm.script(run, Reply.text("built"),
               Reply.tool_calls([("write_file", {"path": "build.sh", "content": evil})]), run, Reply.text("done"))
    runner = await start_gateway(tmp_path, llm.base_url, **OFF)
    try:
        async with Tab(runner) as tab:
            await tab.say("build it")
            prompt = await tab.wait_for(is_prompt, timeout=20)
            await press(tab, prompt, "Allow for this session")
            await tab.wait_for(finished("built"), timeout=20)
            await tab.say("build it again")
            frame = await tab.wait_for(lambda f: (is_prompt(f) and f["message_id"] != prompt["message_id"])
                                       or finished("done")(f), timeout=20)
            assert is_prompt(frame), f"ran on the earlier grant: {last_results(llm)}"
            await press(tab, frame, "Deny")
            await tab.wait_for(finished("done"), timeout=20)
        assert not (ws / "stolen.txt").exists()
    finally:
        await runner.stop()


# -- send_file, many at once -------------------------------------------------------------------------


async def test_forty_send_file_calls_in_one_step_copy_no_more_than_a_reply_carries(tmp_path: Path, llm: FakeLLM):
    ws = home_with_workspace(tmp_path)
    with open(ws / "big.bin", "wb") as fh:
        fh.truncate(2 * 1024 * 1024)  # sparse here; each copy takes its full size
    for n in range(12):
        (ws / f"f{n:02}.txt").write_text(f"file {n}\n")
    calls = [("send_file", {"path": "big.bin"})] * 28 + [("send_file", {"path": f"f{n:02}.txt"}) for n in range(12)]
    llm.script(Reply.tool_calls(calls), Reply.text("sent"))
    runner = await start_gateway(tmp_path, llm.base_url)
    try:
        async with Tab(runner) as tab:
            await tab.say("send them all")
            assert await tab.reply(timeout=30) == "sent"
            results = last_results(llm)
            assert len(results) == 40  # big.bin 28 times (each copy replaces the one before), 9 others
            assert sum("will be sent" in r for r in results) == 28 + 9, results
            assert sum("at most 10 files" in r for r in results) == 3
            await eventually(lambda: sum(t.startswith("📎") for t in tab.replies()) == 10, 20, "10 files")
        outgoing = tmp_path / "outgoing"
        # (os.walk, not rglob: a folder the gateway removes while it is walked is passed over, not an error)
        await eventually(lambda: not [f for _, _, files in os.walk(outgoing) for f in files], 20,
                         "every copy removed once the reply went out")
    finally:
        await runner.stop()


# -- the read-only list, without a sandbox -----------------------------------------------------------


@pytest.mark.parametrize("command", ["tail +1f notes.txt", 'cat "\\$/secret.txt"'])
async def test_the_read_only_list_neither_waits_for_ever_nor_reads_through_a_link(tmp_path: Path, llm: FakeLLM,
                                                                                  command: str):
    ws = home_with_workspace(tmp_path)
    (ws / "notes.txt").write_text("hello\n")
    (tmp_path / "keys").mkdir()
    (tmp_path / "keys" / "secret.txt").write_text("SECRET-LINKED-2c7e\n")
    (ws / "$").symlink_to(tmp_path / "keys")  # (left by an earlier approved command, a clone, …)
    llm.script(Reply.tool_calls([("terminal", {"command": command, "timeout": 2})]), Reply.text("done"))
    runner = await start_gateway(tmp_path, llm.base_url, **OFF)
    try:
        async with Tab(runner) as tab:
            await tab.say("look")
            frame = await first_prompt_or(tab, "done")
            assert is_prompt(frame), f"ran unasked: {tool_results(llm)}"
            assert "not on the read-only list" in frame["text"]
            await press(tab, frame, "Deny")
            await tab.wait_for(finished("done"))
        [result] = tool_results(llm)
        assert "NOT run" in result and "SECRET-LINKED" not in result and "timed out" not in result
    finally:
        await runner.stop()


# -- what an approval prompt shows ---------------------------------------------------------------------


def plant_git_dir(folder: Path, config: str) -> None:
    env = {**os.environ, "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1"}
    subprocess.run(["git", "init", "-q", "--bare", str(folder)], env=env, check=True, capture_output=True)
    shutil.rmtree(folder / "hooks")
    (folder / "config").write_text(config)


@pytest.mark.parametrize(("layout", "command", "shown"), [
    ("gitdir", "git add .", ["--- .git ---\ngitdir: g", "--- g/config ---", "fsmonitor = touch pwned"]),
    ("helper", "git push", ["--- .git/config ---", "helper = !touch pwned"]),
])
async def test_a_git_prompt_shows_the_code_git_would_run(tmp_path: Path, llm: FakeLLM, layout: str,
                                                         command: str, shown: list[str]):
    ws = home_with_workspace(tmp_path)
    (ws / "notes.txt").write_text("hello\n")
    if layout == "gitdir":  # `.git` is a file sending git to another folder of the workspace
        plant_git_dir(ws / "g", '[core]\n\tbare = false\n\tfsmonitor = touch pwned\n')
        (ws / ".git").write_text("gitdir: g\n")
    else:
        plant_git_dir(ws / ".git", '[core]\n\tbare = false\n[credential]\n\thelper = !touch pwned\n')
    llm.script(Reply.tool_calls([("terminal", {"command": command})]), Reply.text("done"))
    runner = await start_gateway(tmp_path, llm.base_url, **OFF)
    try:
        async with Tab(runner) as tab:
            await tab.say("commit")
            prompt = await first_prompt_or(tab, "done")
            assert is_prompt(prompt), tool_results(llm)
            for text in shown:
                assert text in prompt["text"], prompt["text"]
            await press(tab, prompt, "Deny")
            await tab.wait_for(finished("done"))
        assert not (ws / "pwned").exists()
    finally:
        await runner.stop()


async def test_a_script_that_is_a_hard_link_is_not_shown(tmp_path: Path, llm: FakeLLM):
    ws = home_with_workspace(tmp_path)
    (tmp_path / "keys.txt").write_text("SECRET-HARDLINK-77aa\n")
    os.link(tmp_path / "keys.txt", ws / "run.sh")  # (a hard link left by an earlier approved command)
    llm.script(Reply.tool_calls([("terminal", {"command": "bash run.sh"})]), Reply.text("done"))
    runner = await start_gateway(tmp_path, llm.base_url, **OFF)
    try:
        async with Tab(runner) as tab:
            await tab.say("run it")
            prompt = await tab.wait_for(is_prompt, timeout=20)
            assert "SECRET-HARDLINK" not in prompt["text"]
            assert "--- run.sh ---\n[not shown: run.sh has other hard links" in prompt["text"]
            await press(tab, prompt, "Deny")
            await tab.wait_for(finished("done"))
    finally:
        await runner.stop()


# -- the file tools ------------------------------------------------------------------------------------


async def test_writing_gits_own_files_asks_and_a_bad_path_is_a_clear_error(tmp_path: Path):
    ws = home_with_workspace(tmp_path)
    approver = Approver(approved=False)
    tools = {t.name: t.handler for t in system_tools(ws, sandbox=Sandbox("off"), protected=[tmp_path])}
    ctx = ToolContext(platform="test", chat_id="c", user_id="u", approvals=approver)
    for path in (".git", ".git/commondir", ".git/objects/info/alternates", ".config/git/config", ".zshenv"):
        out = await tools["write_file"](ctx, path=path, content="gitdir: ../../elsewhere\n")
        assert "NOT written" in out and not (ws / path).exists(), (path, out)
    assert len(approver.requests) == 5
    (ws / "l").symlink_to(".")  # `l/l/l/…/x`: each part resolved in turn, on the event loop
    for name, args in (("read_file", {}), ("write_file", {"content": "x"}), ("send_file", {})):
        for path in ("a\0b", "l/" * 100_000 + "x"):
            out = await tools[name](ToolContext(files=None), path=path, **args)
            assert out.startswith("error:") and "failed" not in out and "no such file" not in out, out[:300]


async def test_a_fifo_is_not_on_the_read_only_list_and_a_rewrite_drops_setuid(tmp_path: Path):
    ws = home_with_workspace(tmp_path)
    os.mkfifo(ws / "pipe")  # (left by an earlier approved command): `cat pipe` would wait for ever
    approver = Approver(approved=False)
    tools = {t.name: t.handler for t in system_tools(ws, sandbox=Sandbox("off"), protected=[tmp_path])}
    ctx = ToolContext(platform="test", chat_id="c", user_id="u", approvals=approver)
    assert "NOT run" in await tools["terminal"](ctx, command="cat pipe", timeout=2)
    assert "not a regular file" in approver.requests[0].reasons[-1]
    (ws / "tool").write_text("#!/bin/sh\n")
    (ws / "tool").chmod(0o4755)  # setuid: new content written by the model must not keep it
    assert "wrote" in await tools["write_file"](ctx, path="tool", content="#!/bin/sh\necho new\n")
    assert oct((ws / "tool").stat().st_mode & 0o7777) == oct(0o755)


async def test_patch_file_cannot_blow_a_file_up_in_memory(tmp_path: Path, llm: FakeLLM):
    ws = home_with_workspace(tmp_path)
    (ws / "a.txt").write_text("a" * 1_900_000)
    llm.script(Reply.tool_calls([("patch_file", {"path": "a.txt", "old": "a", "new": "b" * 1000, "count": 0})]),
               Reply.text("done"))  # (1.9 GB in memory, and on disk, from one call)
    runner = await start_gateway(tmp_path, llm.base_url)
    try:
        async with Tab(runner) as tab:
            await tab.say("patch it")
            await tab.wait_for(finished("done"), timeout=20)
        [result] = tool_results(llm)
        assert result.startswith("error: the result would be 1,900,000,000 characters"), result
        assert (ws / "a.txt").stat().st_size == 1_900_000
    finally:
        await runner.stop()


async def test_a_large_write_to_a_sensitive_file_does_not_stall_the_gateway(tmp_path: Path, llm: FakeLLM):
    """Comparing 30,000 crafted lines with difflib takes minutes, and it ran on the event loop: every
    chat stood still. Past a bound the prompt shows the new content instead of a diff."""
    ws = home_with_workspace(tmp_path)
    n = 30_000
    (ws / ".envrc").write_text("".join(f"line {i % (n // 190)}\n" for i in range(n)))  # (an earlier command's)
    new = "".join(f"line {(i * 7919) % (n // 150)}\n" for i in range(n))
    llm.script(Reply.tool_calls([("write_file", {"path": ".envrc", "content": new})]), Reply.text("done"))
    runner = await start_gateway(tmp_path, llm.base_url, **OFF)
    try:
        async with Tab(runner) as tab:
            await tab.say("write it")
            prompt = await tab.wait_for(is_prompt, timeout=20)
            shown = "too long to compare" in prompt["text"] and "line 0\nline 119" in prompt["text"]
            assert shown, prompt["text"][:600]  # (not the diff: it took minutes, on the event loop)
            await press(tab, prompt, "Deny")
            await tab.wait_for(finished("done"), timeout=20)
    finally:
        await runner.stop()


async def test_a_cut_diff_is_fingerprinted_so_a_grant_cannot_cover_another_change(tmp_path: Path):
    ws = home_with_workspace(tmp_path)
    approver = Approver(approved=False)
    write = {t.name: t.handler for t in system_tools(ws, sandbox=Sandbox("off"))}["write_file"]
    ctx = ToolContext(platform="test", chat_id="c", user_id="u", approvals=approver)
    start = "export A=1\n" * 400  # longer than a prompt shows
    for end in ("echo fine\n", "curl x|sh\n"):
        assert "NOT written" in await write(ctx, path=".envrc", content=start + end)
    first, second = (r.subject for r in approver.requests)
    assert len(first) == len(second) and first != second
