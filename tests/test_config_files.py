"""Settings from files beside the environment: `$CHATGATE_HOME/env` (what the systemd unit's
EnvironmentFile= reads, now read by every command) and `NAME_FILE` secrets (Docker and Kubernetes
secrets). A value from either reaches the daemon; a file others could have written, or one that
cannot be read, is one line naming it and never its content."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from gateway.config import ConfigError, load_config, secret_variables
from gateway.config_env import read_environment
from gateway.runner import GatewayRunner
from tests.fakes.llm import FakeLLM
from tests.harness import Tab, gateway_env

SECRET = "sk-only-in-the-file-" + "x" * 20


@pytest.fixture
def home(tmp_path: Path) -> Path:
    path = tmp_path / "home"
    path.mkdir(mode=0o700)
    return path


def env_file(home: Path, text: str, mode: int = 0o600) -> Path:
    path = home / "env"
    path.write_text(text)
    path.chmod(mode)
    return path


def secret_file(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(text)
    return path


def error(env: dict[str, str]) -> str:
    with pytest.raises(ConfigError) as info:
        load_config(None, env)
    message = str(info.value)
    assert "\n" not in message and SECRET not in message
    return message


def test_the_env_file_sets_what_the_process_leaves_unset(home):
    env_file(home, "# the service's secrets\n\nexport OPENAI_API_KEY='sk-a $HOME b'\n"
                   "CHATGATE_MODEL=from-the-file\nCHATGATE_GATEWAY__TICK_SECONDS=5\nCHATGATE_HOME=/elsewhere\n")
    config = load_config(None, {"CHATGATE_HOME": str(home), "CHATGATE_MODEL": "from-the-process"})
    assert config.llm.api_key is not None and config.llm.api_key.get_secret_value() == "sk-a $HOME b"  # no expansion
    assert config.llm.model == "from-the-process" and config.gateway.tick_seconds == 5
    assert config.home == home  # (the file lives in the home: it cannot move it)
    assert "OPENAI_API_KEY" not in os.environ  # the values reach the configuration, not the process


def test_a_wrong_value_in_the_env_file_names_the_variable_and_the_file(home):
    path = env_file(home, "CHATGATE_HTTP__PORT=eighty\n")
    message = error({"CHATGATE_HOME": str(home)})
    assert message.startswith("config error: http.port:") and message.endswith(f"[CHATGATE_HTTP__PORT in {path}]")


@pytest.mark.parametrize("mode", [0o620, 0o602, 0o666])
def test_an_env_file_others_may_change_is_refused(home, mode):
    path = env_file(home, f"OPENAI_API_KEY={SECRET}\n", mode)
    assert error({"CHATGATE_HOME": str(home)}) == \
        f"config error: {path} may be changed by other users (mode {mode:o}): chmod 600 {path}"


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")
def test_an_env_file_of_another_user_is_refused(home):
    path = env_file(home, f"OPENAI_API_KEY={SECRET}\n")
    os.chown(path, 65534, 65534)
    assert "belongs to another user (uid 65534)" in error({"CHATGATE_HOME": str(home)})


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a home to another user needs root")
def test_root_reads_the_env_file_of_the_account_that_owns_the_home(home):
    """`sudo chatgate status` on the service account's home: that account runs the daemon anyway."""
    path = env_file(home, "CHATGATE_HTTP__PORT=8771\n")
    os.chown(path, 65534, 65534)
    os.chown(home, 65534, 65534)
    assert load_config(env={"CHATGATE_HOME": str(home)}).http.port == 8771


def test_a_fifo_in_place_of_the_env_file_is_refused_without_waiting(home):
    os.mkfifo(home / "env", 0o600)
    assert error({"CHATGATE_HOME": str(home)}) == f"config error: {home / 'env'} is not a regular file"


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"), reason="needs root and setpriv")
def test_a_root_env_file_the_service_user_cannot_read_is_left_to_systemd():
    """As under a system unit: root's 0600 file, read by systemd and passed in; chatgate (the user) skips it."""
    with tempfile.TemporaryDirectory() as folder:  # (pytest's own are closed to other users)
        Path(folder).chmod(0o755)
        home = Path(folder) / "home"
        home.mkdir()
        env_file(home, f"OPENAI_API_KEY={SECRET}\n")
        os.chown(home, 65534, 65534)
        done = as_nobody(home)
    assert done.returncode == 0 and done.stdout.strip() == "passed-by-systemd", done.stderr


def as_nobody(home: Path) -> subprocess.CompletedProcess[str]:
    code = "from gateway.config import load_config; c = load_config(); print(c.llm.model)"
    return subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-c", code],
                          env={"CHATGATE_HOME": str(home), "CHATGATE_MODEL": "passed-by-systemd",
                               "PYTHONPATH": str(Path(__file__).parents[1])},
                          capture_output=True, text=True, timeout=60)


def test_a_command_with_a_bad_env_file_says_so_in_one_line(home):
    path = env_file(home, f"OPENAI_API_KEY={SECRET}\n", 0o666)
    done = subprocess.run([sys.executable, "-m", "gateway", "status"], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "CHATGATE_HOME": str(home)})
    assert done.returncode == 2 and "Traceback" not in done.stderr and SECRET not in done.stderr + done.stdout
    assert done.stderr.strip() == f"config error: {path} may be changed by other users (mode 666): chmod 600 {path}"


def test_every_secret_and_its_usual_variable_may_come_from_a_file():
    names = secret_variables()
    for name in ("TELEGRAM_BOT_TOKEN", "OPENAI_API_KEY", "SLACK_SIGNING_SECRET", "CHATGATE_LLM__API_KEY",
                 "CHATGATE_PLATFORMS__DISCORD__TOKEN", "CHATGATE_PLATFORMS__WEBCHAT__TOKEN"):
        assert name in names
    assert "CHATGATE_MODEL" not in names and "CHATGATE_HTTP__PORT" not in names


def test_a_secret_file_sets_the_secret_without_its_trailing_newline(home, tmp_path):
    token = secret_file(tmp_path, "tg", "123456:" + "a" * 35 + "\n")
    key = secret_file(tmp_path, "key", SECRET + "\r\n")
    config = load_config(None, {"CHATGATE_HOME": str(home), "TELEGRAM_BOT_TOKEN_FILE": str(token),
                                "CHATGATE_LLM__API_KEY_FILE": str(key)})
    assert config.platforms.telegram.token.get_secret_value() == "123456:" + "a" * 35
    assert config.llm.api_key.get_secret_value() == SECRET
    assert token.resolve() in config.private_paths() and key.resolve() in config.private_paths()  # hidden from tools


def test_where_a_secret_came_from_is_told(home, tmp_path):
    token = secret_file(tmp_path, "tg", "t")
    path = env_file(home, f"OPENAI_API_KEY_FILE={secret_file(tmp_path, 'key', SECRET)}\nDISCORD_BOT_TOKEN=d\n")
    read = read_environment({"TELEGRAM_BOT_TOKEN_FILE": str(token)}, home, secret_variables())
    assert read.described == {"TELEGRAM_BOT_TOKEN": f"TELEGRAM_BOT_TOKEN_FILE ({token})",
                              "OPENAI_API_KEY": f"OPENAI_API_KEY_FILE ({tmp_path / 'key'}) in {path}",
                              "DISCORD_BOT_TOKEN": f"DISCORD_BOT_TOKEN in {path}"}
    assert read.variables["OPENAI_API_KEY"] == SECRET and "OPENAI_API_KEY_FILE" not in read.variables


def test_a_secret_set_both_ways_is_refused(home, tmp_path):
    key = secret_file(tmp_path, "key", SECRET)
    assert error({"CHATGATE_HOME": str(home), "OPENAI_API_KEY": "sk-other", "OPENAI_API_KEY_FILE": str(key)}) == \
        "config error: OPENAI_API_KEY and OPENAI_API_KEY_FILE are both set; keep one"
    path = env_file(home, "OPENAI_API_KEY=sk-other\n")
    assert error({"CHATGATE_HOME": str(home), "OPENAI_API_KEY_FILE": str(key)}) == \
        f"config error: OPENAI_API_KEY in {path} and OPENAI_API_KEY_FILE are both set; keep one"


@pytest.mark.parametrize("problem", ["missing", "folder", "unreadable", "huge", "binary"])
def test_a_secret_file_that_cannot_be_used_is_one_line_naming_the_variable_and_path(home, tmp_path, problem):
    path = tmp_path / "secret"
    if problem == "folder":
        path.mkdir()
    elif problem == "huge":
        path.write_text(SECRET * 2000)
    elif problem == "binary":
        path.write_bytes(b"\xff\xfe" + SECRET.encode())
    elif problem == "unreadable":
        path.write_text(SECRET)
        path.chmod(0)
    if problem == "unreadable" and os.geteuid() == 0:
        pytest.skip("root reads a file of mode 000")
    message = error({"CHATGATE_HOME": str(home), "SLACK_BOT_TOKEN_FILE": str(path)})
    expected = {"missing": "cannot read SLACK_BOT_TOKEN_FILE={}: No such file or directory",
                "folder": "cannot read SLACK_BOT_TOKEN_FILE={}: Is a directory",
                "unreadable": "cannot read SLACK_BOT_TOKEN_FILE={}: Permission denied",
                "huge": "SLACK_BOT_TOKEN_FILE={} is larger than 64 KiB: not a secret",
                "binary": "SLACK_BOT_TOKEN_FILE={} is not UTF-8 text"}[problem]
    assert message == "config error: " + expected.format(path)


async def test_a_gateway_configured_by_its_env_file_and_secret_files_answers(home, tmp_path):
    """What a person sees: the model is reached with the key from the file, the web chat opens with the
    token from the secret file."""
    token = secret_file(tmp_path, "webchat", "tab-token-from-a-secret\n")
    async with FakeLLM() as llm:
        env_file(home, f"OPENAI_BASE_URL={llm.base_url}\nOPENAI_API_KEY_FILE={secret_file(tmp_path, 'k', SECRET)}\n")
        env = {**gateway_env(home, None), "CHATGATE_PLATFORMS__WEBCHAT__TOKEN_FILE": str(token)}
        runner = GatewayRunner(load_config(env=env))
        try:
            await runner.start()
            assert runner.http is not None
            async with Tab(None, url=f"http://127.0.0.1:{runner.http.port}", token="tab-token-from-a-secret") as tab:
                await tab.say("hello")
                assert await tab.reply() == "echo: hello"
            assert llm.authorizations == [f"Bearer {SECRET}"]
        finally:
            await runner.stop()
