"""The terminal's sandbox (bubblewrap): what a command inside cannot do — write outside the
workspace, see chatgate's state, the user's home or the gateway's /proc, reach the network, or
leave anything running — and the approval it takes to step outside it."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path

import pytest

from agent.safety import sandbox as sandbox_module
from agent.safety.sandbox import Sandbox
from agent.tools import ToolContext
from agent.tools.system import system_tools
from tests.fakes.llm import FakeLLM, Reply
from tests.harness import Approver, Tab, eventually, start_gateway


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """A CHATGATE_HOME with its state, and the workspace inside it (the default layout)."""
    (tmp_path / "home" / "workspace").mkdir(parents=True)
    (tmp_path / "home" / "config.yaml").write_text("approvals:\n  mode: ask\n")
    (tmp_path / "home" / "state.db").write_text("the database")
    (tmp_path / "user").mkdir()
    (tmp_path / "user" / ".netrc").write_text("machine example.org password hunter2-secret\n")
    (tmp_path / "outside.txt").write_text("original\n")
    return tmp_path / "home"


def terminal(home: Path, approver: Approver | None = None, unconfined: str = "allowlist", **options):
    box = Sandbox(options.pop("mode", "bwrap"), hidden=[home, home.parent / "user"], **options)
    tool = {t.name: t for t in system_tools(home / "workspace", sandbox=box, unconfined=unconfined)}["terminal"]
    ctx = ToolContext(platform="test", chat_id="c", user_id="u", approvals=approver)

    async def run(command: str, **arguments) -> str:
        return await tool.handler(ctx, command=command, **arguments)

    return run, box


async def test_nothing_outside_the_workspace_can_be_written(home: Path):
    run, box = terminal(home)
    assert box.active, box.describe()
    outside = home.parent / "outside.txt"
    out = await run(f"echo hacked > {outside}; printf 'approvals:\\n  mode: off\\n' >> ../config.yaml; "
                    "echo fine > here.txt; cat here.txt")
    assert "fine" in out
    assert outside.read_text() == "original\n"
    assert (home / "config.yaml").read_text() == "approvals:\n  mode: ask\n"
    assert (home / "workspace" / "here.txt").read_text() == "fine\n"


async def test_chatgates_state_the_users_home_and_the_gateways_proc_are_invisible(home: Path, monkeypatch):
    monkeypatch.setenv("SANDBOX_TEST_TOKEN", "kept-from-commands")  # (a secret-looking name: not passed on)
    approver = Approver(approved=True)  # reading /proc/*/environ asks; say yes and see what the sandbox shows
    run, _ = terminal(home, approver)
    out = await run(f"ls -a ..; cat ../state.db; cat {home.parent}/user/.netrc; "
                    "echo environ: $(cat /proc/*/environ 2>/dev/null | tr '\\0' '\\n' | grep -c SANDBOX_TEST); "
                    "echo processes: $(ls /proc | grep -c '^[0-9]')")
    assert "the database" not in out and "hunter2" not in out
    assert "\n.\n..\nworkspace\n" in out  # the state beside the workspace is gone
    assert "environ: 0" in out  # no process it can see has the gateway's environment
    assert int(out.split("processes: ")[1].split()[0]) < 10  # its own few, not the machine's
    reasons = "\n".join(approver.requests[0].reasons)  # (`cat ../state.db` is a reason of its own)
    assert "another process's environment" in reasons and "chatgate's own state" in reasons


async def test_the_network_is_off_unless_configured(home: Path):
    server = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    probe = (f"python3 -c \"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=3); "
             f"print('connected')\"")
    try:
        off, _ = terminal(home)
        assert "connected" not in await off(probe)
        on, _ = terminal(home, network=True)
        assert "connected" in await on(probe)
    finally:
        server.close()


def _running(marker: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker in (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"):
                    found.append(int(entry.name))
            except OSError:
                pass
    return found


async def test_nothing_the_command_starts_outlives_it(home: Path):
    run, _ = terminal(home, Approver(approved=True))  # (setsid and nohup ask first; a person says yes)
    out = await run("setsid -f sleep 31337; nohup sleep 31338 >/dev/null 2>&1 & (sleep 31339 &); echo started")
    assert "started" in out
    await eventually(lambda: not _running("sleep 3133"), 5, "the sandbox's processes gone")


async def test_dangerous_commands_still_ask_inside_and_leaving_the_sandbox_always_asks(home: Path):
    approver = Approver(approved=False)
    run, _ = terminal(home, approver)
    (home / "workspace" / "victim").mkdir()
    assert "NOT run" in await run("rm -rf victim")
    assert (home / "workspace" / "victim").exists() and len(approver.requests) == 1
    outside = home.parent / "outside.txt"
    out = await run(f"echo changed > {outside}", outside_sandbox=True)  # a "safe" command, outside: asks
    assert "NOT run" in out and outside.read_text() == "original\n"
    assert "OUTSIDE the sandbox" in approver.requests[-1].reasons[0]
    approver.approved = True
    await run(f"echo changed > {outside}", outside_sandbox=True)
    assert outside.read_text() == "changed\n"


async def test_without_bubblewrap_auto_says_so_and_bwrap_refuses(home: Path, monkeypatch):
    monkeypatch.setattr(sandbox_module, "_bwrap", lambda: None)
    auto, box = terminal(home, mode="auto")
    assert "exit code 0" in await auto("echo runs")
    assert not box.active and "NOT available" in box.describe() and "apt-get install bubblewrap" in box.describe()
    required, _ = terminal(home, mode="bwrap")
    out = await required("echo runs")
    assert out.startswith("refused") and "NOT run" in out


async def test_a_two_step_script_from_the_model_is_contained(tmp_path: Path, llm: FakeLLM):
    """write_file a script, then run it: it runs, but only inside the sandbox."""
    script = ("printf 'approvals:\\n  mode: off\\n' >> ../config.yaml\n"
              "cat ../config.yaml ../state.db 2>&1 | head -3\n"
              "tr '\\0' '\\n' < /proc/$PPID/environ | grep -c test-key\n"
              "curl -s -m 2 http://127.0.0.1:9/ || echo no-network\n")
    llm.script(Reply.tool_calls([("write_file", {"path": "run.sh", "content": script})]),
               Reply.tool_calls([("terminal", {"command": "sh run.sh"})]), Reply.text("ran it"))
    (tmp_path / "config.yaml").write_text("gateway:\n  drain_seconds: 2\n")
    runner = await start_gateway(tmp_path, llm.base_url)
    try:
        assert runner.parts.sandbox.active
        async with Tab(runner) as tab:
            await tab.say("run my script")
            assert await tab.reply() == "ran it"
        result = next(m["content"] for m in llm.requests[-1]["messages"] if m.get("role") == "tool"
                      and "exit code" in m["content"])
        assert "no-network" in result and "test-key" not in result
        assert (tmp_path / "config.yaml").read_text() == "gateway:\n  drain_seconds: 2\n"
    finally:
        await runner.stop()


def test_the_gateway_process_is_not_dumpable():
    import subprocess
    import sys

    code = ("from gateway.ops.process import dumpable, not_dumpable; "
            "before = dumpable(); assert not_dumpable(); print(before, dumpable())")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert done.stdout.split() == ["True", "False"], done.stderr



@pytest.mark.parametrize(("files", "command", "shown"), [
    ({"run.sh": "touch ran\n"}, "sh run.sh", "--- run.sh ---\ntouch ran"),
    ({"x.py": "open('ran', 'w')\n"}, "cd . && python3 x.py --fast", "--- x.py ---"),
    ({"tool": "#!/bin/sh\ntouch ran\n"}, "./tool", "--- tool ---"),
    ({"env.sh": "touch ran\n"}, "source env.sh; echo ok", "--- env.sh ---"),
    ({"Makefile": "all:\n\ttouch ran\n"}, "make", "--- Makefile ---"),
    ({"package.json": '{"scripts": {"install": "touch ran"}}'}, "npm install", "--- package.json ---"),
    ({".git/hooks/pre-commit": "#!/bin/sh\ntouch ran\n"}, "git commit -m x", "--- .git/hooks/pre-commit ---"),
])
async def test_without_a_sandbox_running_workspace_code_asks_and_shows_it(home: Path, files: dict[str, str],
                                                                          command: str, shown: str):
    ws = home / "workspace"
    for name, text in files.items():
        (ws / name).parent.mkdir(parents=True, exist_ok=True)
        (ws / name).write_text(text)
        (ws / name).chmod(0o755)
    approver = Approver(approved=False)
    run, _ = terminal(home, approver, mode="off")
    out = await run(command)
    assert "NOT run" in out and not (ws / "ran").exists()
    [asked] = approver.requests
    assert shown in asked.subject and "with no sandbox" in asked.reasons[0]
    inside, _ = terminal(home, Approver(approved=False))  # in the sandbox the same command needs no one
    if command == "sh run.sh":
        assert "exit code 0" in await inside(command) and (ws / "ran").exists()


async def test_without_a_sandbox_ordinary_commands_do_not_ask(home: Path):
    (home / "workspace" / "notes.txt").write_text("hello\n")
    subprocess.run(["git", "init", "-q"], cwd=home / "workspace", check=True)  # (git status: a repo of its own)
    approver = Approver(approved=False)
    run, _ = terminal(home, approver, mode="off")
    for command in ("ls -la", "cat notes.txt | wc -l", "grep -n hello notes.txt",
                    "git status --short 2>/dev/null; echo done"):
        assert "NOT run" not in await run(command), command
    assert approver.requests == []
    # a command off the read-only list asks without a sandbox, unless the operator opted into the classifier
    # alone (agent.sandbox.unconfined: classifier), which calls it safe; code handed to an interpreter asks
    # there too (its paths cannot be checked before it runs: issue 33's attack review)
    assert "NOT run" in await run("printf '%s\\n' one two | tr a-z A-Z")
    assert "not on the read-only list" in approver.requests[0].reasons[-1]
    classifier, _ = terminal(home, approver, unconfined="classifier", mode="off")
    assert await classifier("printf '%s\\n' one two | tr a-z A-Z") == "exit code 0\nONE\nTWO\n"
    assert len(approver.requests) == 1
    assert "NOT run" in await classifier("python3 -c 'print(1)'") and len(approver.requests) == 2


@pytest.mark.parametrize("command", ["cat ../config.yaml", "sqlite3 ../state.db 'select * from approvals'",
                                     "cd .. && ls", "cat {home}/webchat-token", "cp x {home}/config.yaml",
                                     "chatgate pair approve 4F7K2Q", "chatgate status"])
async def test_without_a_sandbox_chatgates_own_state_asks(home: Path, command: str):
    approver = Approver(approved=False)
    tool = {t.name: t for t in system_tools(home / "workspace", sandbox=Sandbox("off"), protected=[home])}["terminal"]
    ctx = ToolContext(platform="test", chat_id="c", user_id="u", approvals=approver)
    out = await tool.handler(ctx, command=command.format(home=home))
    assert "NOT run" in out and "chatgate's own" in approver.requests[0].reasons[0]


async def test_without_a_sandbox_the_workspace_by_its_full_path_does_not_ask(home: Path):
    approver = Approver(approved=False)
    tool = {t.name: t for t in system_tools(home / "workspace", sandbox=Sandbox("off"), protected=[home])}["terminal"]
    ctx = ToolContext(platform="test", chat_id="c", user_id="u", approvals=approver)
    out = await tool.handler(ctx, command=f"ls {home}/workspace && ls ./src/.. 2>/dev/null; echo fine")
    assert "fine" in out and approver.requests == []


@pytest.mark.parametrize("unconfined", ["allowlist", "classifier"])
@pytest.mark.parametrize("command", ["cat d/config.yaml", "ls d", "cat inner/up/state.db", "cp x d/config.yaml",
                                     "sh -c 'cat \"d/webchat-token\"'", "tar -cf x.tar d/"])
async def test_without_a_sandbox_a_link_to_chatgates_home_asks(home: Path, command: str, unconfined: str):
    """Protected paths are compared after links and `..` are resolved, not as text: `d` -> CHATGATE_HOME."""
    ws = home / "workspace"
    (ws / "d").symlink_to(home)
    (ws / "inner").mkdir()
    (ws / "inner" / "up").symlink_to("../..")
    approver = Approver(approved=False)
    tool = {t.name: t for t in system_tools(ws, sandbox=Sandbox("off"), protected=[home],
                                            unconfined=unconfined)}["terminal"]
    out = await tool.handler(ToolContext(platform="test", chat_id="c", user_id="u", approvals=approver),
                             command=command)
    assert "NOT run" in out and f"reaches {home}" in approver.requests[0].reasons[0]
