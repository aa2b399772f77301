"""Attack review (issue 33, 3): classifier-only mode (`agent.sandbox.unconfined: classifier`, no sandbox).

The state check matched literal paths, so a glob, a `cd`, quotes inside a path or a `-C DIR` read the
config and the web chat token unasked (and the token was not redacted from what a command printed);
`${x@P}` and `hash -p` ran a deletion unasked. Now a command whose paths cannot be checked before it
runs asks, a word is read as bash reads it and from every folder the line names, the two shell features
are understood, and the web chat token is a secret like the others.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.safety.classifier import classify
from agent.safety.shell_words import read
from gateway.config import load_config
from tests.fakes.llm import FakeLLM, Reply
from tests.harness import Tab, gateway_env, is_prompt, press, start_gateway
from tests.test_unconfined_allowlist import ask_or_done, finished, tool_results

CONFIG = "# canary-config-4417\ngateway:\n  drain_seconds: 2\n"
CLASSIFIER_ONLY = {"agent__sandbox__mode": "off", "agent__sandbox__unconfined": "classifier",
                   "review__enabled": "false"}


@pytest.fixture
def home(tmp_path: Path, monkeypatch) -> Path:
    """A user's home with chatgate's state in ~/.chatgate (the default), a config, a folder D to lose."""
    user = tmp_path / "user"
    state = user / ".chatgate"
    (state / "workspace" / "D").mkdir(parents=True)
    (state / "config.yaml").write_text(CONFIG)
    monkeypatch.setenv("HOME", str(user))
    return state


async def asks_and_nothing_happens(home: Path, llm: FakeLLM, command: str) -> str:
    """Run `command` through the daemon; it must ask (denied here): returns the prompt's text."""
    llm.script(Reply.tool_calls([("terminal", {"command": command})]), Reply.text("done"))
    runner = await start_gateway(home, llm.base_url, **CLASSIFIER_ONLY)
    token = (home / "webchat-token").read_text().strip()
    try:
        async with Tab(runner) as tab:
            await tab.say("go")
            prompt = await ask_or_done(tab)
            assert is_prompt(prompt), f"ran unasked: {tool_results(llm)}"
            await press(tab, prompt, "Deny")
            await tab.wait_for(finished("done"))
        [result] = tool_results(llm)
        assert "NOT run" in result and "canary-config" not in result and token not in result
        assert (home / "workspace" / "D").is_dir()
        return prompt["text"]
    finally:
        await runner.stop()


@pytest.mark.parametrize("command", [
    "cat ~/.chat*/con*",
    "cd ~; cat .chatgate/webchat-token",
    "x='$(rm -rf D)'; echo ${x@P}",
    "hash -p /bin/rm ls; ls -rf D",
    "echo 'cd ~; cat .chatgate/config.yaml' | sh",
])
async def test_the_issues_commands_ask_in_classifier_only_mode(home: Path, llm: FakeLLM, command: str):
    await asks_and_nothing_happens(home, llm, command)


@pytest.mark.parametrize("command", [
    "cat {parent}/sta''te/config.yaml",
    "cat {parent}/st\\ate/config.yaml",
    "tar -C {parent} -cf - state/config.yaml | tar -xO",
])
async def test_a_path_spelled_with_quotes_or_read_from_a_named_folder_reaches_the_state(
        tmp_path: Path, llm: FakeLLM, command: str):
    state = tmp_path / "state"  # CHATGATE_HOME somewhere the classifier has no name for
    (state / "workspace" / "D").mkdir(parents=True)
    (state / "config.yaml").write_text(CONFIG)
    text = await asks_and_nothing_happens(state, llm, command.format(parent=tmp_path))
    assert "chatgate's own state" in text and "Asked each time" in text


async def test_the_web_chat_token_is_masked_in_what_a_command_prints_and_in_the_prompt(home: Path,
                                                                                      llm: FakeLLM):
    runner = await start_gateway(home, llm.base_url, **CLASSIFIER_ONLY)  # (makes the token file)
    token = (home / "webchat-token").read_text().strip()
    llm.script(Reply.tool_calls([("terminal", {"command": "cat ../webchat-token"})]),
               Reply.tool_calls([("terminal", {"command": f"echo {token} > ../webchat-token"})]), Reply.text("done"))
    try:
        async with Tab(runner) as tab:
            await tab.say("show me the token")
            await press(tab, await tab.wait_for(is_prompt), "Allow once")
            second = await tab.wait_for(is_prompt, count=2)
            assert token not in second["text"] and "echo *** > ../webchat-token" in second["text"]
            await press(tab, second, "Deny")
            await tab.wait_for(finished("done"))
        first, _ = tool_results(llm)
        assert "exit code 0\n***" in first and token not in first
    finally:
        await runner.stop()


def test_the_token_file_is_one_of_the_secrets_once_it_is_made(tmp_path: Path):
    config = load_config(env=gateway_env(tmp_path, None))
    assert config.secrets() == []
    (tmp_path / "webchat-token").write_text("a-token-made-at-start-123\n")
    assert "a-token-made-at-start-123" in config.secrets()


@pytest.mark.parametrize(("command", "why"), [
    ("x='$(rm -rf D)'; echo ${x@P}", "recursive delete: rm -rf D"),
    ("x='`rm -rf D`'; echo \"${x@P}\"", "recursive delete: rm -rf D"),
    ("read x; echo ${x@P}", "prompt expansion"),
    ("hash -p /bin/rm ls; ls -rf D", "recursive delete: rm -rf D"),
    ("hash -p/bin/rm cat; cat -rf D", "recursive delete: rm -rf D"),
    ("hash -p \"$p\" ls; ls D", "cannot see"),
    ("BASH_CMDS[ls]=/bin/rm; ls -rf D", "recursive delete: rm -rf D"),
    ("PS4='$(rm -rf D)'; set -x; ls", "recursive delete: rm -rf D"),
    ("enable -f ./x.so cat", "shared object"),
])
def test_the_classifier_reads_prompt_expansion_and_the_command_table(command: str, why: str):
    verdict = classify(command)
    assert verdict.verdict == "dangerous" and any(why in r for r in verdict.reasons), verdict


@pytest.mark.parametrize(("command", "unknown"), [
    ("cat ~/.chat*/con*", "a glob"), ("cd ~; cat x", "`cd`"), ("pushd /; cat x", "`pushd`"),
    ("cat $F", "a variable"), ("cat ${x@P}", "prompt expansion"), ("cat $(pwd)/x", "command substitution"),
    ("cat `pwd`/x", "backticks"), ("cat <(cat x)", "process substitution"), ("cat {a,b}/x", "brace expansion"),
    ("cat ~root/x", "`~root`"), ("hash -p /bin/rm ls", "`hash -p`"), ("BASH_CMDS[ls]=/bin/rm", "BASH_CMDS"),
    ("cat x | sh", "its input"), ("bash -c 'cd /; cat x'", "`cd`"), ("eval 'cat *'", "a glob"),
    ("cat <<EOF\n$(id)\nEOF", "here-document"), ("PS4='$(id)' bash -xc ls", "`PS4=`"),
])
def test_what_makes_a_path_unknown_before_it_runs_is_named(command: str, unknown: str):
    assert any(unknown in why for why in read(command, "/home/u").unknown), read(command, "/home/u")


@pytest.mark.parametrize(("command", "words"), [
    ("cat ~/a '/b c' \"d\"e f\\ g", ["cat", "/home/u/a", "/b c", "de", "f g"]),
    ("X=~/x:~/y make DESTDIR=~/z", ["X=/home/u/x:/home/u/y", "make", "DESTDIR=/home/u/z"]),
    ("ls -la 2>&1 | head -n 5 > out.txt", ["ls", "-la", "head", "-n", "5", "out.txt"]),
    ("sh -c 'cat ~/.chatgate/x'", ["sh", "-c", "cat ~/.chatgate/x", "cat", "/home/u/.chatgate/x"]),
    ("cat <<'EOF' | python3\n$(not run)\nEOF", ["cat", "python3"]),
    ("[ -f x ] && find . -name '*.py' -exec wc -l {} +",
     ["[", "-f", "x", "]", "find", ".", "-name", "*.py", "-exec", "wc", "-l", "{}", "+"]),
])
def test_plain_words_are_read_as_bash_hands_them_over_and_nothing_is_unknown(command: str, words: list[str]):
    reading = read(command, "/home/u")
    assert reading.words == words and reading.unknown == [], reading
