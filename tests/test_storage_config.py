"""`storage.url`: unset is SQLite in the home; a PostgreSQL address is a secret (masked, redacted, never echoed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.config import ConfigError, load_config


def test_unset_is_sqlite_in_the_home(tmp_path: Path):
    config = load_config(env={"CHATGATE_HOME": str(tmp_path)})
    assert config.storage.url is None and config.db_path == tmp_path / "state.db"


def test_a_postgresql_address_is_taken_and_its_password_is_a_secret(tmp_path: Path):
    url = "postgresql://chat:hunter2@db.example:5432/chatgate"
    config = load_config(env={"CHATGATE_HOME": str(tmp_path), "CHATGATE_STORAGE__URL": url})
    assert config.storage.url is not None and config.storage.url.get_secret_value() == url
    assert "hunter2" not in repr(config.storage)  # masked wherever the config is shown
    assert "hunter2" in config.secrets() and url in config.secrets()  # redacted from logs and replies, alone too


@pytest.mark.parametrize("url", ["mysql://chat:hunter2@db.example/chatgate", "postgresql://chat:hunter2@db.example/",
                                 "chat:hunter2@db.example/chatgate"])
def test_a_wrong_address_is_one_line_that_does_not_repeat_it(tmp_path: Path, url: str):
    with pytest.raises(ConfigError) as raised:
        load_config(env={"CHATGATE_HOME": str(tmp_path), "CHATGATE_STORAGE__URL": url})
    said = str(raised.value)
    assert said.startswith("config error: storage.url: must be postgresql://") and "\n" not in said
    assert "hunter2" not in said and "CHATGATE_STORAGE__URL" in said
