"""The deployment files say what the code accepts: every variable the compose file passes is one
chatgate reads (and an unset one is ignored), and the image runs as a user, with its health check
on /readyz. (No Docker engine runs on the test machines; the image itself is not built here.)"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from gateway.config import load_config
from tests.harness import gateway_env

DEPLOY = Path(__file__).parents[1] / "deploy"
SAMPLES = {"OPENAI_BASE_URL": "http://127.0.0.1:9/v1", "CHATGATE_HTTP__PUBLIC_URL": "https://chat.example.org",
           "CHATGATE_ACCESS__ADMINS": "{telegram: ['12345']}", "TELEGRAM_BOT_TOKEN": "123456:" + "a" * 35}


def compose_environment() -> dict[str, str]:
    compose = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    return compose["services"]["chatgate"]["environment"]


def test_every_variable_the_compose_file_passes_is_read(tmp_path):
    for var in compose_environment():
        value = SAMPLES.get(var, "x" * 24)
        needs = {"SLACK_BOT_TOKEN": {"SLACK_APP_TOKEN": "xapp-1"}}.get(var, {})  # (socket mode's other token)
        config = load_config(env={**gateway_env(tmp_path, None), var: value, **needs})
        dumped = config.model_dump_json() + "".join(config.secrets())
        assert value in dumped or "12345" in dumped, f"{var} is not read by chatgate"


def test_the_compose_defaults_left_empty_are_ignored(tmp_path):
    env = {var: "" for var in compose_environment()}
    config = load_config(env={**gateway_env(tmp_path, None), **env})
    assert not config.llm.configured and config.http.public_url is None
    assert [name for name, section in config.platforms.sections().items() if section.configured] == []


def test_the_image_is_multi_stage_unprivileged_and_checks_readiness():
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    assert len(re.findall(r"^FROM ", dockerfile, re.M)) == 2
    assert re.search(r"^USER chatgate$", dockerfile, re.M)
    assert re.search(r"^HEALTHCHECK .*\n.*/readyz", dockerfile, re.M)
    assert re.search(r"^STOPSIGNAL SIGTERM$", dockerfile, re.M)
    assert 'CMD ["chatgate", "run"]' in dockerfile and "CHATGATE_HOME=/data" in dockerfile
