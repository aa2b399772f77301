"""`chatgate config show [--origin]`: the configuration in effect, secrets masked, and where each
value came from (the file, a variable, the home's env file, a NAME_FILE secret, the default)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml

FILE_KEY = "sk-from-the-file-0123456789"
FILE_TOKEN = "123456:from-a-secret-file"


def chatgate(home: Path, *args: str, **variables: str) -> subprocess.CompletedProcess[str]:
    kept = {k: v for k, v in os.environ.items() if not k.startswith(("CHATGATE_", "OPENAI_", "TELEGRAM_"))}
    return subprocess.run([sys.executable, "-m", "gateway", *args], capture_output=True, text=True, timeout=60,
                          env={**kept, "CHATGATE_HOME": str(home), **variables})


def a_home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    (home / "config.yaml").write_text(f"llm:\n  model: file-model\n  api_key: {FILE_KEY}\n")
    (home / "env").write_text("CHATGATE_HTTP__PORT=8799\n")
    (home / "env").chmod(0o600)
    (tmp_path / "token").write_text(FILE_TOKEN + "\n")
    return home


def test_the_configuration_in_effect_is_shown_with_every_secret_masked(tmp_path: Path):
    home = a_home(tmp_path)
    done = chatgate(home, "config", "show", TELEGRAM_BOT_TOKEN_FILE=str(tmp_path / "token"))
    assert done.returncode == 0, done.stderr
    shown = yaml.safe_load(done.stdout)
    assert shown["llm"]["model"] == "file-model" and shown["http"]["port"] == 8799
    assert shown["llm"]["api_key"] == "********" and shown["platforms"]["telegram"]["token"] == "********"
    assert shown["gateway"]["busy_policy"] == "queue"  # (a default)
    assert FILE_KEY not in done.stdout + done.stderr and FILE_TOKEN not in done.stdout + done.stderr


def test_each_value_says_where_it_came_from(tmp_path: Path):
    home = a_home(tmp_path)
    done = chatgate(home, "config", "show", "--origin", TELEGRAM_BOT_TOKEN_FILE=str(tmp_path / "token"),
                    CHATGATE_GATEWAY__DRAIN_SECONDS="3", OPENAI_BASE_URL="http://127.0.0.1:9/v1")
    assert done.returncode == 0, done.stderr
    lines = dict(line.split(": ", 1) for line in done.stdout.splitlines())
    assert lines["llm.model"] == f"file-model  # {home / 'config.yaml'}"
    assert lines["llm.api_key"] == f"'********'  # {home / 'config.yaml'}"
    assert lines["http.port"] == f"8799  # CHATGATE_HTTP__PORT in {home / 'env'}"
    assert lines["gateway.drain_seconds"] == "3.0  # CHATGATE_GATEWAY__DRAIN_SECONDS"
    assert lines["llm.base_url"] == "http://127.0.0.1:9/v1  # OPENAI_BASE_URL"
    assert lines["platforms.telegram.token"] == f"'********'  # TELEGRAM_BOT_TOKEN_FILE ({tmp_path / 'token'})"
    assert lines["gateway.busy_policy"] == "queue  # default"
    assert FILE_KEY not in done.stdout and FILE_TOKEN not in done.stdout


def test_a_wrong_configuration_is_one_line(tmp_path: Path):
    home = a_home(tmp_path)
    done = chatgate(home, "config", "show", CHATGATE_HTTP__PORT="not-a-port")
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and "CHATGATE_HTTP__PORT" in done.stderr, done.stderr
