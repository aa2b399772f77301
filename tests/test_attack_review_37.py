"""Review 37 (PostgreSQL): the password of `storage.url` never shows in what chatgate says when the address
cannot be used."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gateway.config import ConfigError, load_config
from gateway.storage.database import StorageError
from gateway.storage.postgres_engine import PostgresEngine, where
from tests.harness import free_port

# -- the storage.url password, written with a raw `@`, `/`, `?` or `#` -------------------------------------------
# asyncpg splits an address at its FIRST `@` and takes what follows a `:` there for the port; `urlsplit` (and so
# chatgate's redaction) at the last `@`. A password such as `p@ss:TAIL` made asyncpg raise
# "invalid literal for int() with base 10: 'TAIL@host'", which `chatgate run` printed ("chatgate cannot start: …",
# the journal), and `doctor` and `status` printed in a traceback: a part of the password nothing masked.

RAW_PASSWORDS = ["p@ss:tail-SECRET-7", "pa/ss:tail-SECRET-7", "pa?ss:tail-SECRET-7", "pa#ss:tail-SECRET-7"]


@pytest.mark.parametrize("password", RAW_PASSWORDS)
def test_a_storage_url_whose_password_asyncpg_would_misread_is_refused_without_repeating_it(tmp_path: Path,
                                                                                          password: str):
    url = f"postgresql://chat:{password}@127.0.0.1:{free_port()}/chatgate"
    with pytest.raises(ConfigError) as raised:
        load_config(env={"CHATGATE_HOME": str(tmp_path), "CHATGATE_STORAGE__URL": url})
    said = str(raised.value)
    assert said.startswith("config error: storage.url: must be postgresql://") and "\n" not in said
    assert "SECRET" not in said and "tail" not in said


def test_an_encoded_password_is_taken_and_masked_as_the_server_knows_it_too(tmp_path: Path):
    url = "postgresql://chat:p%40ss-SECRET-7@db.example:5432/chatgate"
    config = load_config(env={"CHATGATE_HOME": str(tmp_path), "CHATGATE_STORAGE__URL": url})
    assert {"p%40ss-SECRET-7", "p@ss-SECRET-7"} <= set(config.secrets())


@pytest.mark.parametrize("password", RAW_PASSWORDS)
async def test_the_engine_never_quotes_asyncpgs_reading_of_an_address(password: str):
    """What reaches the engine without the config's check (`storage migrate --to`, a test's URL): its error
    names where, never a part of the address asyncpg took for a host or a port."""
    url = f"postgresql://chat:{password}@127.0.0.1:{free_port()}/chatgate"
    with pytest.raises(StorageError) as raised:
        await PostgresEngine(url).connect()
    assert "SECRET" not in str(raised.value) and "tail" not in str(raised.value)
    assert "SECRET" not in where(url)


@pytest.mark.parametrize("password", RAW_PASSWORDS[:2])
def test_storage_migrate_and_status_say_one_line_without_the_password(tmp_path: Path, password: str):
    home = tmp_path / "home"
    home.mkdir()
    (home / "state.db").write_bytes(b"")
    url = f"postgresql://chat:{password}@127.0.0.1:{free_port()}/chatgate"
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHATGATE_")}
    migrated = subprocess.run([sys.executable, "-m", "gateway", "storage", "migrate", "--to", url],
                              capture_output=True, text=True, env={**env, "CHATGATE_HOME": str(home)}, timeout=120,
                              stdin=subprocess.DEVNULL)
    assert migrated.returncode == 1 and "SECRET" not in migrated.stdout + migrated.stderr
    assert "Traceback" not in migrated.stderr and "must be postgresql://" in migrated.stderr
    for command in (["status"], ["doctor"]):
        done = subprocess.run([sys.executable, "-m", "gateway", *command], capture_output=True, text=True,
                              env={**env, "CHATGATE_HOME": str(home), "CHATGATE_STORAGE__URL": url}, timeout=120,
                              stdin=subprocess.DEVNULL)
        assert "SECRET" not in done.stdout + done.stderr and "Traceback" not in done.stderr, command
