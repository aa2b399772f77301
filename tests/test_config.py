"""Unit tests for gateway/config.py: defaults, file, environment, and the one-line errors."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import SecretStr

from gateway.config import DEFAULT_IDENTITY, Config, ConfigError, load_config

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def home(tmp_path: Path) -> Path:
    path = tmp_path / "home"
    path.mkdir()
    return path


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def load(home: Path, text: str | None = None, **env: str) -> Config:
    """Load `text` as $CHATGATE_HOME/config.yaml with exactly `env` as the environment."""
    if text is not None:
        write(home / "config.yaml", text)
    return load_config(None, {"CHATGATE_HOME": str(home), **env})


def error(home: Path, text: str | None = None, **env: str) -> str:
    with pytest.raises(ConfigError) as info:
        load(home, text, **env)
    message = str(info.value)
    assert "\n" not in message, f"not one line: {message!r}"
    assert message.startswith("config error:"), message
    return message


# --------------------------------------------------------------------------- defaults


def test_defaults_without_a_file(home: Path) -> None:
    config = load(home)
    assert config.llm.base_url is None
    assert config.llm.api_key is None
    assert config.llm.model == "gpt-4o-mini"
    assert config.llm.configured is False
    assert config.gateway.tick_seconds == 60.0
    assert config.gateway.busy_policy == "queue"
    assert config.gateway.group_sessions == "per_user"
    assert config.gateway.timezone is None
    assert config.agent.identity == DEFAULT_IDENTITY
    assert config.http.host == "127.0.0.1"
    assert config.http.port == 8765
    assert config.access.dm_policy == "pairing"
    assert config.access.allowed_users == {}
    assert config.platforms.telegram.enabled is False
    assert config.platforms.telegram.base_url == "https://api.telegram.org"
    assert config.home == home
    assert config.db_path == home / "state.db"
    assert config.secrets() == []


def test_empty_file_gives_defaults(home: Path) -> None:
    config = load(home, "")
    assert config.http.port == 8765
    assert load(home, "# only a comment\n").llm.model == "gpt-4o-mini"


def test_home_defaults_to_dot_chatgate_in_the_user_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    config = load_config(None, {})
    assert config.home == tmp_path / ".chatgate"


# --------------------------------------------------------------------------- file values


def test_file_values_are_read_and_typed(home: Path) -> None:
    config = load(home, """
llm:
  base_url: http://localhost:11434/v1
  model: llama3.2
  temperature: 0.5
gateway:
  tick_seconds: 0.5
  busy_policy: interrupt
  group_sessions: shared
  timezone: Europe/Berlin
http:
  port: 9000
access:
  allowed_users:
    telegram: [12345, "67890"]
  admins:
    telegram: [12345]
  dm_policy: allowlist
platforms:
  telegram:
    token: "123:abc"
    require_mention: false
    chats:
      -100123: {require_mention: true}
""")
    assert config.llm.base_url == "http://localhost:11434/v1"
    assert config.llm.model == "llama3.2"
    assert config.llm.temperature == 0.5
    assert config.llm.configured is True
    assert config.gateway.tick_seconds == 0.5
    assert config.gateway.busy_policy == "interrupt"
    assert config.gateway.group_sessions == "shared"
    assert config.gateway.timezone == "Europe/Berlin"
    assert config.http.port == 9000
    # numeric ids written bare in YAML become strings, as platforms deliver them
    assert config.access.allowed_users == {"telegram": ["12345", "67890"]}
    assert config.access.admins == {"telegram": ["12345"]}
    assert config.access.dm_policy == "allowlist"
    assert config.platforms.telegram.enabled is True
    assert config.platforms.require_mention("telegram", "-100123") is True
    assert config.platforms.require_mention("telegram", "-100999") is False


def test_explicit_config_path_wins_over_home(home: Path, tmp_path: Path) -> None:
    write(home / "config.yaml", "http: {port: 1111}\n")
    other = write(tmp_path / "other.yaml", "http: {port: 2222}\n")
    config = load_config(other, {"CHATGATE_HOME": str(home)})
    assert config.http.port == 2222
    assert config.home == home  # the state directory still comes from CHATGATE_HOME


def test_yaml_off_and_no_stay_strings(home: Path) -> None:
    # YAML 1.1 would read `off` as False; the config reads it as the word
    config = load(home, "approvals:\n  mode: off\n")
    assert config.approvals.mode == "off"


def test_numbers_are_accepted_where_text_is_expected(home: Path) -> None:
    config = load(home, "llm:\n  api_key: 123456\n  model: 7\nplatforms:\n  webchat:\n    token: 987654\n")
    assert config.llm.api_key is not None and config.llm.api_key.get_secret_value() == "123456"
    assert config.llm.model == "7"
    assert config.platforms.webchat.token.get_secret_value() == "987654"


# --------------------------------------------------------------------------- CHATGATE_SECTION__KEY


def test_env_overrides_are_parsed_as_yaml_scalars(home: Path) -> None:
    config = load(
        home, "http:\n  port: 1111\n",
        CHATGATE_HTTP__PORT="8080",
        CHATGATE_GATEWAY__TICK_SECONDS="0.25",
        CHATGATE_ACCESS__ALLOWED_USERS="{telegram: [1, 2]}",
        CHATGATE_PLATFORMS__TELEGRAM__REQUIRE_MENTION="false",
        CHATGATE_LLM__BASE_URL="http://127.0.0.1:8000/v1",
        CHATGATE_APPROVALS__MODE="off",
    )
    assert config.http.port == 8080  # the environment beats the file
    assert config.gateway.tick_seconds == 0.25
    assert config.access.allowed_users == {"telegram": ["1", "2"]}
    assert config.platforms.telegram.require_mention is False
    assert config.llm.base_url == "http://127.0.0.1:8000/v1"
    assert config.approvals.mode == "off"


def test_env_keeps_the_rest_of_the_file_section(home: Path) -> None:
    config = load(home, "llm:\n  model: from-file\n  base_url: http://file\n", CHATGATE_LLM__MODEL="from-env")
    assert config.llm.model == "from-env"
    assert config.llm.base_url == "http://file"


def test_env_override_variable_names_are_case_insensitive_in_the_path(home: Path) -> None:
    config = load(home, CHATGATE_Http__Port="9999")
    assert config.http.port == 9999


def test_numeric_secret_from_env_is_kept_as_text(home: Path) -> None:
    config = load(home, CHATGATE_PLATFORMS__WEBCHAT__TOKEN="123456", CHATGATE_LLM__API_KEY="42")
    assert config.platforms.webchat.token.get_secret_value() == "123456"
    assert config.llm.api_key.get_secret_value() == "42"


def test_variables_without_a_section_are_not_keys(home: Path) -> None:
    # CHATGATE_HOME and CHATGATE_MODEL have no "__": they must not be read as config keys
    config = load(home, CHATGATE_SOMETHING="x")
    assert config.http.port == 8765


# --------------------------------------------------------------------------- OpenAI aliases


def test_aliases_fill_unset_llm_keys(home: Path) -> None:
    config = load(home, OPENAI_BASE_URL="http://alias/v1", OPENAI_API_KEY="sk-alias", CHATGATE_MODEL="alias-model")
    assert config.llm.base_url == "http://alias/v1"
    assert config.llm.api_key.get_secret_value() == "sk-alias"
    assert config.llm.model == "alias-model"
    assert config.llm.configured is True


def test_aliases_do_not_override_the_file(home: Path) -> None:
    config = load(home, "llm:\n  base_url: http://file/v1\n  api_key: sk-file\n  model: file-model\n",
                  OPENAI_BASE_URL="http://alias/v1", OPENAI_API_KEY="sk-alias", CHATGATE_MODEL="alias-model")
    assert config.llm.base_url == "http://file/v1"
    assert config.llm.api_key.get_secret_value() == "sk-file"
    assert config.llm.model == "file-model"


def test_alias_fills_a_key_the_file_leaves_empty(home: Path) -> None:
    config = load(home, "llm:\n  base_url: ''\n  api_key:\n", OPENAI_BASE_URL="http://alias/v1",
                  OPENAI_API_KEY="sk-alias")
    assert config.llm.base_url == "http://alias/v1"
    assert config.llm.api_key.get_secret_value() == "sk-alias"


def test_section_variable_beats_the_alias(home: Path) -> None:
    config = load(home, CHATGATE_MODEL="alias-model", CHATGATE_LLM__MODEL="section-model")
    assert config.llm.model == "section-model"


def test_alias_values_are_taken_verbatim(home: Path) -> None:
    # an alias is not YAML: a key that looks like a number or a mapping stays the text it is
    config = load(home, OPENAI_API_KEY="12345", CHATGATE_MODEL="a: b")
    assert config.llm.api_key.get_secret_value() == "12345"
    assert config.llm.model == "a: b"


def test_telegram_token_alias(home: Path) -> None:
    config = load(home, TELEGRAM_BOT_TOKEN="123:tok")
    assert config.platforms.telegram.enabled is True
    assert config.platforms.telegram.token.get_secret_value() == "123:tok"


# --------------------------------------------------------------------------- errors


def test_unknown_top_level_key_lists_the_sections(home: Path) -> None:
    message = error(home, "lmm:\n  model: x\n")
    assert message.startswith("config error: lmm: unknown key; expected one of: ")
    for section in ("llm", "gateway", "agent", "http", "platforms", "access"):
        assert section in message
    assert str(home / "config.yaml") in message


def test_unknown_nested_key_lists_the_keys_of_its_section(home: Path) -> None:
    message = error(home, "llm:\n  modle: x\n")
    assert "llm.modle: unknown key; expected one of: base_url, api_key, model" in message


def test_unknown_key_in_a_per_chat_section_lists_its_keys(home: Path) -> None:
    message = error(home, "platforms:\n  telegram:\n    chats:\n      '-100':\n        mention: false\n")
    assert "platforms.telegram.chats.-100.mention: unknown key; expected one of: require_mention" in message


def test_unknown_key_from_env_names_the_variable(home: Path) -> None:
    message = error(home, CHATGATE_HTTP__PROT="80")
    assert "http.prot: unknown key; expected one of: host, port" in message
    assert "[CHATGATE_HTTP__PROT]" in message


@pytest.mark.parametrize(
    ("text", "key", "expected"),
    [
        ("http:\n  port: abc\n", "http.port", "valid integer"),
        ("http:\n  port: 70000\n", "http.port", "less than or equal to 65535"),
        ("gateway:\n  tick_seconds: 0\n", "gateway.tick_seconds", "greater than 0"),
        ("gateway:\n  busy_policy: sometimes\n", "gateway.busy_policy", "'queue', 'interrupt' or 'steer'"),
        ("access:\n  dm_policy: everyone\n", "access.dm_policy", "'pairing', 'allowlist' or 'open'"),
        ("gateway:\n  timezone: Mars/Olympus\n", "gateway.timezone", "unknown time zone"),
        ("llm: 5\n", "llm", "valid dictionary"),
        ("platforms:\n  telegram:\n    mode: webhook\n", "platforms.telegram", "webhook_url"),
        ("llm:\n  max_retries: 11\n", "llm.max_retries", "less than or equal to 10"),
    ],
)
def test_bad_file_value_names_key_and_expectation(home: Path, text: str, key: str, expected: str) -> None:
    message = error(home, text)
    assert message.startswith(f"config error: {key}: ")
    assert expected in message
    assert f"[{home / 'config.yaml'}]" in message
    assert "CHATGATE_" not in message


def test_bad_value_shows_what_was_given(home: Path) -> None:
    message = error(home, "http:\n  port: 70000\n")
    assert "(got 70000)" in message


@pytest.mark.parametrize(
    ("var", "value", "key", "expected"),
    [
        ("CHATGATE_HTTP__PORT", "80x", "http.port", "valid integer"),
        ("CHATGATE_GATEWAY__TICK_SECONDS", "-1", "gateway.tick_seconds", "greater than 0"),
        ("CHATGATE_GATEWAY__BUSY_POLICY", "never", "gateway.busy_policy", "'queue', 'interrupt' or 'steer'"),
        ("CHATGATE_PLATFORMS__TELEGRAM__MODE", "webhook", "platforms.telegram", "webhook_url"),
        # the error is deeper than the variable's key: still the variable's fault
        ("CHATGATE_ACCESS__ALLOWED_USERS", "{telegram: [[1]]}", "access.allowed_users.telegram.0", "valid string"),
    ],
)
def test_bad_env_value_names_the_variable(home: Path, var: str, value: str, key: str, expected: str) -> None:
    message = error(home, "http:\n  host: 127.0.0.1\n", **{var: value})
    assert message.startswith(f"config error: {key}: ")
    assert expected in message
    assert f"[{var}]" in message
    assert "config.yaml" not in message


def test_bad_file_value_is_not_blamed_on_an_alias_that_did_not_apply(home: Path) -> None:
    message = error(home, "llm:\n  base_url: [a, b]\n", OPENAI_BASE_URL="http://alias/v1")
    assert message.startswith("config error: llm.base_url: ")
    assert "OPENAI_BASE_URL" not in message
    assert f"[{home / 'config.yaml'}]" in message


def test_env_value_does_not_hide_a_bad_file_section(home: Path) -> None:
    # the file says `llm: 5`; a variable for a key inside llm must not silently replace it
    message = error(home, "llm: 5\n", OPENAI_API_KEY="sk-x", CHATGATE_LLM__MODEL="m")
    assert message.startswith("config error: llm: ")
    assert f"[{home / 'config.yaml'}]" in message


def test_several_errors_are_counted_on_the_one_line(home: Path) -> None:
    message = error(home, "http:\n  port: abc\ngateway:\n  tick_seconds: -1\n  busy_policy: x\n")
    assert message.endswith("(and 2 more)")


def test_invalid_yaml_gives_line_and_column(home: Path) -> None:
    message = error(home, "llm:\n  model: gpt\n  base_url: [unclosed\nhttp:\n  port: 1\n")
    assert message.startswith(f"config error: {home / 'config.yaml'} is not valid YAML at line ")
    assert "line 4, column 5" in message


def test_invalid_yaml_tab_indentation(home: Path) -> None:
    message = error(home, "llm:\n\tmodel: x\n")
    assert "is not valid YAML at line 2, column 1" in message


@pytest.mark.parametrize("text", ["- llm\n- http\n", "just words\n", "42\n"])
def test_file_that_is_not_a_mapping(home: Path, text: str) -> None:
    message = error(home, text)
    assert message == f"config error: {home / 'config.yaml'} must hold a mapping of sections (llm:, gateway:, …)"


def test_missing_explicit_config_file(home: Path, tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    with pytest.raises(ConfigError) as info:
        load_config(missing, {"CHATGATE_HOME": str(home)})
    assert str(info.value) == f"config error: file not found: {missing}"


def test_config_path_that_is_a_directory(home: Path, tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path, {"CHATGATE_HOME": str(home)})
    message = str(info.value)
    assert message.startswith(f"config error: cannot read {tmp_path}")
    assert "\n" not in message


# --------------------------------------------------------------------------- secrets


def test_secrets_are_secret_str_and_listed(home: Path) -> None:
    config = load(home, "llm:\n  api_key: sk-file-secret\nplatforms:\n  webchat:\n    token: web-secret\n",
                  TELEGRAM_BOT_TOKEN="123:tg-secret",
                  CHATGATE_PLATFORMS__TELEGRAM__WEBHOOK_SECRET="hook-secret")
    assert isinstance(config.llm.api_key, SecretStr)
    assert isinstance(config.platforms.webchat.token, SecretStr)
    assert isinstance(config.platforms.telegram.token, SecretStr)
    assert sorted(config.secrets()) == sorted(["sk-file-secret", "web-secret", "123:tg-secret", "hook-secret"])
    shown = repr(config) + str(config) + config.model_dump_json()
    for secret in config.secrets():
        assert secret not in shown


def test_empty_secret_is_not_listed(home: Path) -> None:
    config = load(home, "llm:\n  api_key: ''\n")
    assert config.secrets() == []


@pytest.mark.parametrize(
    ("text", "env"),
    [
        ("llm:\n  api_key: [sk-live-SECRET1]\n", {}),
        ("llm:\n  api_key: {nested: sk-live-SECRET1}\n", {}),
        ("", {"CHATGATE_LLM__API_KEY": "{k: sk-live-SECRET1}"}),
        ("", {"CHATGATE_PLATFORMS__TELEGRAM__TOKEN": "[sk-live-SECRET1]"}),
        ("", {"CHATGATE_PLATFORMS__WEBCHAT__TOKEN": "[sk-live-SECRET1]"}),
        ("", {"CHATGATE_PLATFORMS__TELEGRAM__WEBHOOK_SECRET": "{a: sk-live-SECRET1}"}),
        ("", {"CHATGATE_PLATFORMS__TELEGRAM__TOKEN": "sk-live-SECRET1", "CHATGATE_PLATFORMS__TELEGRAM__MODE": "webhook"}),
        ("llm:\n  api_key: sk-live-SECRET1\n  model: [x]\n", {}),
        ("llm:\n  api_key: sk-live-SECRET1\nhttp:\n  port: nope\n", {"OPENAI_API_KEY": "sk-live-SECRET1"}),
    ],
)
def test_secret_values_never_appear_in_errors(home: Path, text: str, env: dict[str, str]) -> None:
    message = error(home, text, **env)
    assert "SECRET1" not in message


# --------------------------------------------------------------------------- the command line


def _clean_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("CHATGATE_", "OPENAI_", "TELEGRAM_"))}
    env["CHATGATE_HOME"] = str(home)
    return env


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("http:\n  prot: 80\n", "config error: http.prot: unknown key; expected one of: host, port"),
        ("llm: [unclosed\n", "is not valid YAML at line 2, column 1"),
        ("http:\n  port: 99999\n", "config error: http.port: input should be less than or equal to 65535"),
    ],
)
def test_cli_bad_config_exits_2_with_one_line(home: Path, tmp_path: Path, text: str, expected: str) -> None:
    bad = write(tmp_path / "bad.yaml", text)
    result = subprocess.run(
        [sys.executable, "-m", "gateway", "--config", str(bad), "run"],
        cwd=ROOT, env=_clean_env(home), capture_output=True, text=True, timeout=30,
    )
    assert result.returncode == 2, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("config error:")
    assert expected in lines[0]
    assert "Traceback" not in result.stderr + result.stdout
    assert not (home / "state.db").exists()  # nothing was started


def test_cli_missing_config_file_exits_2(home: Path, tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "gateway", "--config", str(tmp_path / "absent.yaml"), "run"],
        cwd=ROOT, env=_clean_env(home), capture_output=True, text=True, timeout=30,
    )
    assert result.returncode == 2
    assert result.stderr.splitlines() == [f"config error: file not found: {tmp_path / 'absent.yaml'}"]
