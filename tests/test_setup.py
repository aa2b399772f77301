"""`chatgate setup` as a person runs it: once with every answer given as an option (no terminal), and
once on a real pseudo-terminal, answering the prompts as they come; both against the fake LLM and
the fake Telegram, through the real clients. What is checked is what the person gets: the config
file (its values as `chatgate run` reads them, its mode), the lines printed, the exit status, and
that nothing is written when a test fails, an answer is missing or the person says no."""

from __future__ import annotations

import asyncio
import os
import pty
import pwd
import re
import stat
import sys
from pathlib import Path

import pytest

from gateway.config import load_config
from tests.fakes.discord import FakeDiscord
from tests.fakes.llm import FakeLLM
from tests.fakes.slack import FakeSlack
from tests.fakes.telegram import FakeTelegram
from tests.harness import eventually, free_port

SYSTEMCTL = "#!/bin/sh\necho \"$@\" >> \"$(dirname \"$0\")/systemctl.calls\"\n"  # a machine's systemctl, recording


def environment(home: Path) -> dict[str, str]:
    """This process's environment without the settings setup would take as defaults."""
    kept = {k: v for k, v in os.environ.items()
            if not k.startswith(("CHATGATE_", "OPENAI_", "TELEGRAM_", "DISCORD_", "SLACK_"))}
    return {**kept, "CHATGATE_HOME": str(home)}


async def setup(home: Path, *args: str, **variables: str) -> tuple[int, str, str]:
    """`chatgate setup ARGS` without a terminal (the fakes go on answering meanwhile)."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gateway", "setup", *args, env={**environment(home), **variables},
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(process.communicate(), 60)
    assert b"Traceback" not in err, err.decode()
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


def options(llm: FakeLLM, tg: FakeTelegram, **more: str) -> list[str]:
    given = {"llm-base-url": llm.base_url, "llm-api-key": "sk-test", "model": "fake-model", "platform": "telegram",
             "token": tg.token, "api-url": tg.url, "admin": "4242", **more}
    return [*(part for key, value in given.items() for part in (f"--{key}", value)), "--no-service"]


async def test_every_answer_as_an_option(tmp_path: Path, llm: FakeLLM, tg: FakeTelegram):
    home = tmp_path / "home"
    status, out, err = await setup(home, *options(llm, tg))
    assert status == 0, err
    assert "ok: llm endpoint answers" in out and "ok: @chatgate_bot (id 123)" in out
    assert f"wrote {home / 'config.yaml'} (mode 0600" in out
    assert "next: chatgate run starts it" in out
    assert stat.S_IMODE((home / "config.yaml").stat().st_mode) == 0o600
    config = load_config(env={"CHATGATE_HOME": str(home)})
    assert (config.llm.base_url, config.llm.model, config.llm.api_key.get_secret_value()) == \
        (llm.base_url, "fake-model", "sk-test")
    telegram = config.platforms.telegram
    assert (telegram.token.get_secret_value(), telegram.base_url) == (tg.token, tg.url)
    assert config.access.admins == {"telegram": ["4242"]}
    assert len(tg.calls_to("getMe")) == 1 and not tg.calls_to("getUpdates")

    first = (home / "config.yaml").read_text()
    status, _, err = await setup(home, *options(llm, tg, admin="5151"))  # run again: never replaced unasked
    assert status == 2 and f"{home / 'config.yaml'} exists: --force replaces it" in err
    assert (home / "config.yaml").read_text() == first

    status, _, err = await setup(home, *options(llm, tg, admin="5151"), "--force")
    assert status == 0, err
    assert load_config(env={"CHATGATE_HOME": str(home)}).access.admins == {"telegram": ["4242", "5151"]}
    assert (home / "config.yaml.bak").read_text() == first
    assert stat.S_IMODE((home / "config.yaml.bak").stat().st_mode) == 0o600


async def test_secrets_from_the_usual_variables(tmp_path: Path, llm: FakeLLM, tg: FakeTelegram):
    """The key and the token need not be options (seen in the process list): the variables chatgate
    reads are the defaults where the file has none."""
    home = tmp_path / "home"
    given = [part for part in options(llm, tg) if part not in ("--token", tg.token, "--llm-api-key", "sk-test")]
    status, _, err = await setup(home, *given, TELEGRAM_BOT_TOKEN="123:other", OPENAI_API_KEY="sk-env")
    assert status == 1 and "Telegram refused the bot token" in err  # (the variable's token is the one tested)
    status, _, err = await setup(home, *given, TELEGRAM_BOT_TOKEN=tg.token, OPENAI_API_KEY="sk-env")
    assert status == 0, err
    config = load_config(env={"CHATGATE_HOME": str(home)})  # (written in the file: read without the variables)
    assert (config.platforms.telegram.token.get_secret_value(), config.llm.api_key.get_secret_value()) == \
        (tg.token, "sk-env")


async def test_slack_discord_and_the_web_chat(tmp_path: Path, llm: FakeLLM):
    llm_options = ["--llm-base-url", llm.base_url, "--model", "fake-model", "--no-service"]
    async with FakeSlack() as slack, FakeDiscord() as discord:
        status, out, err = await setup(tmp_path / "slack", *llm_options, "--platform", "slack", "--token",
                                       slack.bot_token, "--slack-app-token", slack.app_token, "--api-url",
                                       slack.api_base, "--admin", "U1001")
        assert status == 0, err
        assert "ok: chatgate in Fake Team (bot user UBOT)" in out
        config = load_config(env={"CHATGATE_HOME": str(tmp_path / "slack")})
        assert (config.platforms.slack.mode, config.platforms.slack.app_token.get_secret_value()) == \
            ("socket", slack.app_token)
        assert config.access.admins == {"slack": ["U1001"]}

        discord_options = [*llm_options, "--platform", "discord", "--token", discord.token, "--api-url",
                           discord.api_base]
        status, out, err = await setup(tmp_path / "discord", *discord_options, "--admin", "ann")
        assert (status, out) == (2, "")
        assert err == "chatgate setup: --admin: 'ann' does not look like a Discord user id (e.g. 123456789012345678)\n"
        status, out, err = await setup(tmp_path / "discord", *discord_options, "--admin", "123456789012345678")
        assert status == 0 and "ok: chatgate (id 9000)" in out, err

    status, out, err = await setup(tmp_path / "web", *llm_options, "--platform", "webchat")
    assert status == 0, err
    assert "then open the link it prints" in out
    config = load_config(env={"CHATGATE_HOME": str(tmp_path / "web")})
    assert config.platforms.webchat.enabled is True and config.access.admins == {}


@pytest.mark.skipif(os.geteuid() != 0, reason="sudo's case: root writing for another account")
async def test_under_sudo_the_file_is_the_person_behind_sudos(tmp_path: Path, llm: FakeLLM, tg: FakeTelegram):
    """`sudo chatgate setup` writes for the account `service install` will run the service as."""
    home = tmp_path / "home"
    status, _, err = await setup(home, *options(llm, tg), SUDO_USER="nobody")
    assert status == 0, err
    for written in (home, home / "config.yaml"):
        assert written.stat().st_uid == pwd.getpwnam("nobody").pw_uid, written
    assert stat.S_IMODE((home / "config.yaml").stat().st_mode) == 0o600


async def test_missing_answers_without_a_terminal_are_listed(tmp_path: Path):
    status, out, err = await setup(tmp_path / "home", "--llm-base-url", "http://127.0.0.1:9/v1")
    assert status == 2 and out == ""
    assert err == ("chatgate setup: no terminal to ask on, and no answer for: --model, --platform (with its --token "
                   "and --admin, unless webchat) (give them as options; chatgate setup --help)\n")
    assert not (tmp_path / "home").exists()


async def test_a_refused_token_or_a_silent_endpoint_writes_nothing(tmp_path: Path, llm: FakeLLM, tg: FakeTelegram):
    home = tmp_path / "home"
    status, out, err = await setup(home, *options(llm, tg, token="123:revoked"))
    assert status == 1
    assert err.startswith("chatgate setup: Telegram refused the bot token — get a new token from @BotFather")
    assert "revoked" not in out + err
    nobody = f"http://127.0.0.1:{free_port()}/v1"
    status, out, err = await setup(home, *options(llm, tg, **{"llm-base-url": nobody}))
    assert status == 1 and err.startswith("chatgate setup: llm endpoint: "), err
    assert len(tg.calls_to("getMe")) == 1  # (the first run's: the second ended at the endpoint, its first test)
    assert not (home / "config.yaml").exists()


class Terminal:
    """`chatgate setup` on a pseudo-terminal of its own (its controlling terminal: getpass reads there),
    read as it writes; `answer` waits for a prompt's text, then types a line."""

    def __init__(self, home: Path, *args: str, path: str | None = None) -> None:
        env = environment(home)
        if path is not None:
            env["PATH"] = path
        self.pid, self.fd = pty.fork()
        if self.pid == 0:  # the child: becomes chatgate on the terminal
            os.execve(sys.executable, [sys.executable, "-m", "gateway", "setup", *args], env)
        self.screen = ""  # what is on it after the last prompt answered
        self.transcript = ""  # all of it
        self._more = asyncio.Event()
        asyncio.get_running_loop().add_reader(self.fd, self._read)

    def _read(self) -> None:
        try:
            chunk = os.read(self.fd, 4096)
        except OSError:  # (EIO: the child has ended)
            chunk = b""
        if not chunk:
            asyncio.get_running_loop().remove_reader(self.fd)
        text = chunk.decode(errors="replace").replace("\r\n", "\n")
        self.screen += text
        self.transcript += text
        self._more.set()

    async def wait_for(self, text: str, timeout: float = 30.0) -> str:
        """The screen once `text` is on it (after what was seen before)."""
        try:
            async with asyncio.timeout(timeout):
                while text not in self.screen:
                    self._more.clear()
                    await self._more.wait()
        except TimeoutError:
            raise AssertionError(f"{text!r} did not show within {timeout}s; the screen:\n{self.transcript}") from None
        return self.screen

    async def answer(self, prompt: str, line: str) -> None:
        await self.wait_for(prompt)
        self.screen = self.screen[self.screen.index(prompt) + len(prompt):]  # the next prompt is after this one
        os.write(self.fd, line.encode() + b"\r")

    async def exit_status(self) -> int:
        _, status = await asyncio.wait_for(asyncio.to_thread(os.waitpid, self.pid, 0), 60)
        return os.waitstatus_to_exitcode(status)

    def close(self) -> None:
        asyncio.get_running_loop().remove_reader(self.fd)
        os.close(self.fd)
        try:  # (a test that failed midway leaves it waiting for an answer)
            os.kill(self.pid, 9)
            os.waitpid(self.pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass


async def test_on_a_terminal_as_a_person_answers(tmp_path: Path, llm: FakeLLM, tg: FakeTelegram):
    """The Telegram id is read from the message the person sends the bot (the code shown, not a
    stranger's message before it); agreeing to the service runs `chatgate service install`."""
    home, tools, units = tmp_path / "home", tmp_path / "bin", tmp_path / "units"
    tools.mkdir()
    (tools / "systemctl").write_text(SYSTEMCTL)
    (tools / "systemctl").chmod(0o755)
    term = Terminal(home, "--api-url", tg.url, "--unit-dir", str(units), path=f"{tools}:{os.environ['PATH']}")
    try:
        await term.answer("Model endpoint, OpenAI-compatible (e.g. https://api.openai.com/v1; Ollama: "
                          "http://localhost:11434/v1): ", llm.base_url)
        await term.answer("API key (Enter: none, for a local server): ", "sk-typed")
        await term.answer("Model (e.g. gpt-4o-mini; on Ollama e.g. llama3.1): ", "fake-model")
        await term.wait_for("ok: llm endpoint answers")
        await term.answer("Platform (telegram, discord, slack, webchat): ", "telegram")
        await term.answer("Bot token (from @BotFather: /newbot, or /mybots → your bot → API Token): ", tg.token)
        await term.wait_for("ok: @chatgate_bot (id 123)")
        await term.answer("(Enter: find it by sending the bot a message): ", "")
        screen = await term.wait_for("waiting for it")
        found = re.search(r"open https://t.me/chatgate_bot\?start=(\w+) and press Start, or send the bot: /start (\w+)",
                          screen)
        assert found and found[1] == found[2], screen
        tg.user_message("hello bot", user_id=777, first_name="Stranger", username=None)
        tg.user_message(f"/start {found[1]}", user_id=4242, first_name="Ann", username="ann")
        await term.answer("From Ann (@ann), id 4242. Make them the admin? [Y/n]: ", "")
        await term.answer("Install chatgate as a systemd service now (started at boot, restarted if it fails)? "
                          "[y/N]: ", "y")
        await term.wait_for("next: chatgate status shows it")
        assert await term.exit_status() == 0, term.transcript
    finally:
        term.close()
    assert "sk-typed" not in term.transcript and tg.token not in term.transcript  # (typed without echo)
    config = load_config(env={"CHATGATE_HOME": str(home)})
    assert (config.llm.api_key.get_secret_value(), config.access.admins) == ("sk-typed", {"telegram": ["4242"]})
    assert stat.S_IMODE((home / "config.yaml").stat().st_mode) == 0o600
    assert f"CHATGATE_HOME={home}" in (units / "chatgate.service").read_text()
    assert (tools / "systemctl.calls").read_text().splitlines()[-1].endswith("enable --now chatgate.service")
    assert not any(call.get("offset") for call in tg.calls_to("getUpdates"))  # nothing marked read: the daemon gets it

    await rerun_offers_what_is_there_and_replaces_only_when_asked(home, tg)


async def rerun_offers_what_is_there_and_replaces_only_when_asked(home: Path, tg: FakeTelegram) -> None:
    before = (home / "config.yaml").read_text()
    term = Terminal(home)
    try:
        await term.answer("Model endpoint, OpenAI-compatible", "")
        await term.answer("API key (Enter: none, for a local server) (Enter keeps the current one): ", "")
        await term.answer("Model (e.g. gpt-4o-mini; on Ollama e.g. llama3.1) [fake-model]: ", "")
        await term.answer("Platform (telegram, discord, slack, webchat) [telegram]: ", "")
        await term.answer("API Token) (Enter keeps the current one): ", "")
        await term.answer("Your Telegram user id, to make you chatgate's admin [4242]: ", "5151")
        await term.answer(f"Replace {home / 'config.yaml'}? (the current one is kept as config.yaml.bak) [y/N]: ", "")
        await term.wait_for("left as it was; nothing written")
        assert await term.exit_status() == 1
    finally:
        term.close()
    assert (home / "config.yaml").read_text() == before and not (home / "config.yaml.bak").exists()


async def test_ctrl_c_stops_and_writes_nothing(tmp_path: Path):
    term = Terminal(tmp_path / "home")
    try:
        await term.wait_for("Model endpoint, OpenAI-compatible")
        # (once it waits for the answer, as a person's Ctrl-C finds it: Python's input() misses a SIGINT that
        # comes between writing its prompt and reading)
        await eventually(lambda: Path(f"/proc/{term.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "S",
                         what="setup waiting for the answer")
        os.write(term.fd, b"\x03")  # Ctrl-C, as the terminal sends it
        await term.wait_for("chatgate setup stopped: nothing written")
        assert await term.exit_status() == 130
    finally:
        term.close()
    assert "Traceback" not in term.transcript and not (tmp_path / "home").exists()
