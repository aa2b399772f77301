"""chatgate's state out of the agent's reach wherever it lives: a config file named with `--config`
is hidden from sandboxed commands (its folder too, unless that folder is shared) and an unconfined
command naming it asks; a workspace that holds CHATGATE_HOME or the config file is refused at start."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from gateway.config import load_config
from gateway.runner import GatewayRunner
from tests.fakes.llm import FakeLLM, Reply
from tests.harness import Tab, eventually, free_port, gateway_env, is_prompt, press
from tests.test_sandbox_root import MARKER, outside  # noqa: F401 - a fixture

AS_ROOT = os.geteuid() == 0


def chatgate(env: dict[str, str], log: Path, *args: str) -> subprocess.Popen[bytes]:
    """`chatgate <args>` in the background, its stdout and stderr into `log`."""
    with open(log, "wb") as out:
        return subprocess.Popen([sys.executable, "-m", "gateway", *args], env={**os.environ, **env},
                                stdout=out, stderr=subprocess.STDOUT)


def web_chat_of(home: Path, port: int) -> Any:
    """What `Tab` needs of a gateway running in another process: its port and the web chat's token."""
    token = (home / "webchat-token").read_text().strip()
    return SimpleNamespace(http=SimpleNamespace(port=port),
                           adapters={"webchat": SimpleNamespace(gate=SimpleNamespace(token=token))})


def tool_results(llm: FakeLLM) -> list[str]:
    return [m["content"] for r in llm.requests for m in r["messages"] if m.get("role") == "tool"]


async def test_a_config_named_with_dash_dash_config_and_its_folder_are_hidden_from_commands(
        tmp_path: Path, outside: Path, llm: FakeLLM):  # noqa: F811
    folder = outside / "chatgate"
    folder.mkdir()
    config = folder / "cfg.yaml"
    config.write_text(f"# {MARKER}\ngateway:\n  drain_seconds: 2\n")
    (folder / "bot.env").write_text("SIBLING_TOKEN=sibling-secret-77\n")
    script = f"cat {config}\ncat {folder}/bot.env\nls -a {folder}\necho script-done\n"
    llm.script(Reply.tool_calls([("write_file", {"path": "run.sh", "content": script})]),
               Reply.tool_calls([("terminal", {"command": "sh run.sh"})]), Reply.text("ran it"))
    home, port, log = tmp_path / "home", free_port(), tmp_path / "gateway.log"
    daemon = chatgate(gateway_env(home, llm.base_url, http__port=port), log, "--config", str(config), "run")
    try:
        await eventually(lambda: "chatgate is running" in log.read_text() or daemon.poll() is not None, 30,
                         "start-up")
        assert daemon.poll() is None, log.read_text()
        async with Tab(web_chat_of(home, port)) as tab:  # type: ignore[arg-type]
            await tab.say("run my script")
            assert await tab.reply() == "ran it"
        result = next(r for r in tool_results(llm) if "script-done" in r)
        assert MARKER not in result and "sibling-secret-77" not in result, result
        assert "\n.\n..\nscript-done" in result  # the folder is empty inside
        if AS_ROOT:  # and the start says loudly what root means
            assert any("WARNING" in line and "runs as root" in line for line in log.read_text().splitlines())
    finally:
        daemon.terminate()
        await asyncio.to_thread(daemon.wait, 30)


async def test_unconfined_a_command_naming_the_config_asks_first(tmp_path: Path, outside: Path,  # noqa: F811
                                                                 llm: FakeLLM):
    folder = outside / "chatgate"
    folder.mkdir()
    config = folder / "cfg.yaml"
    config.write_text(f"# {MARKER}\n")
    llm.script(Reply.tool_calls([("terminal", {"command": f"cat {config}"})]), Reply.text("left it"))
    env = gateway_env(tmp_path / "home", llm.base_url, agent__sandbox__mode="off",
                      agent__sandbox__unconfined="classifier")  # (only the classifier and the protected paths)
    runner = GatewayRunner(load_config(config, env=env))
    await runner.start()
    try:
        async with Tab(runner) as tab:
            await tab.say("show me the config")
            prompt = await tab.wait_for(is_prompt)
            assert f"cat {config}" in prompt["text"] and "chatgate's own state" in prompt["text"]
            await press(tab, prompt, "Deny")
            assert await tab.reply(2) == "left it"
        [result] = tool_results(llm)
        assert "NOT run" in result and MARKER not in result
    finally:
        await runner.stop()


async def test_a_config_beside_the_workspace_is_hidden_alone(tmp_path: Path, outside: Path,  # noqa: F811
                                                             llm: FakeLLM):
    """The config's folder holds the workspace: the file is hidden, not the folder (nor the workspace)."""
    config = outside / "cfg.yaml"
    config.write_text(f"# {MARKER}\n")
    (outside / "ws").mkdir()
    llm.script(Reply.tool_calls([("terminal", {"command": f"cat {config}; ls {outside}; echo done > mine.txt"})]),
               Reply.text("looked"))
    env = gateway_env(tmp_path / "home", llm.base_url, agent__workspace=outside / "ws")
    runner = GatewayRunner(load_config(config, env=env))
    await runner.start()
    try:
        async with Tab(runner) as tab:
            await tab.say("look")
            assert await tab.reply() == "looked"
        [result] = tool_results(llm)
        assert MARKER not in result and "cfg.yaml\nws" in result, result
        assert (outside / "ws" / "mine.txt").read_text() == "done\n"
    finally:
        await runner.stop()


async def refused(log: Path, process: subprocess.Popen[bytes]) -> list[str]:
    """The lines `chatgate run` printed before it exited (it must exit, not start)."""
    try:
        await eventually(lambda: process.poll() is not None or "chatgate is running" in log.read_text(), 30,
                         "an exit or a start")
        assert process.poll() is not None, f"chatgate run started: {log.read_text()}"
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)
    assert process.returncode != 0
    return log.read_text().splitlines()


async def test_a_workspace_holding_chatgates_home_is_refused_at_start_with_one_line(tmp_path: Path):
    user = tmp_path / "user"
    (user / ".chatgate").mkdir(parents=True)
    env = {**gateway_env(user / ".chatgate", "http://127.0.0.1:9/v1", agent__workspace="~"), "HOME": str(user)}
    lines = await refused(tmp_path / "run.log", chatgate(env, tmp_path / "run.log", "run"))
    assert lines == [(f"chatgate cannot start: agent.workspace {user} contains chatgate's state "
                      f"(CHATGATE_HOME={user}/.chatgate), which the agent's tools would then reach unasked; "
                      "choose a folder of its own (the default is $CHATGATE_HOME/workspace)")]
    assert not (user / ".chatgate" / "state.db").exists()


async def test_a_workspace_holding_the_config_file_is_refused_at_start(tmp_path: Path):
    workspace = tmp_path / "projects"
    (workspace / "bot").mkdir(parents=True)
    (workspace / "bot" / "cfg.yaml").write_text("gateway:\n  drain_seconds: 2\n")
    link = tmp_path / "cfg.yaml"
    link.symlink_to(workspace / "bot" / "cfg.yaml")  # named through a link: compared resolved
    env = gateway_env(tmp_path / "home", "http://127.0.0.1:9/v1", agent__workspace=workspace)
    lines = await refused(tmp_path / "run.log", chatgate(env, tmp_path / "run.log", "--config", str(link), "run"))
    assert len(lines) == 1 and "Traceback" not in lines[0], lines
    assert lines[0].startswith(f"chatgate cannot start: agent.workspace {workspace} contains the config file "
                               f"{workspace}/bot/cfg.yaml")


def test_what_is_hidden_and_protected_for_each_place_of_the_config(tmp_path: Path, outside: Path):  # noqa: F811
    home = tmp_path / "home"
    env = gateway_env(home, None)
    assert load_config(env=env).private_paths() == [home]  # the default: the config is in the home
    (outside / "chatgate").mkdir()
    (outside / "chatgate" / "config.yaml").write_text("")
    assert load_config(outside / "chatgate" / "config.yaml", env=env).private_paths() == [home, outside / "chatgate"]
    shared = outside.parent / f"{outside.name}.yaml"  # e.g. /srv/chatgate.yaml: /srv is not chatgate's alone
    shared.write_text("")
    try:
        assert load_config(shared, env=env).private_paths() == [home, shared]
    finally:
        shared.unlink()
    (outside / "ws").mkdir()  # a folder that holds the workspace: the file alone
    (outside / "cfg.yaml").write_text("")
    config = load_config(outside / "cfg.yaml", env={**env, "CHATGATE_AGENT__WORKSPACE": str(outside / "ws")})
    assert config.private_paths() == [home, outside / "cfg.yaml"] and config.workspace_problem() is None
