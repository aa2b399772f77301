"""The deployment files say what the code accepts: every variable the compose file passes is one
chatgate reads (and an unset one is ignored), and the image runs as a user, with its health check
on /readyz; the shipped unit is the one the code renders; the image and `make install` pin the
versions the tests ran with. (No Docker engine runs on the test machines; the image is not built.)"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import yaml

from gateway.config import load_config
from gateway.ops.process import EXIT_HOME_IN_USE, EXIT_REFUSED
from gateway.ops.unit import shipped_unit
from tests.harness import gateway_env
from tests.test_service import verify

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


def test_the_instances_compose_file_runs_two_instances_on_one_database(tmp_path):
    compose = yaml.safe_load((DEPLOY / "compose.instances.yaml").read_text())
    first, second = compose["services"]["chatgate-a"], compose["services"]["chatgate-b"]
    assert first["environment"] == second["environment"] and first["build"] == second["build"]
    assert first["volumes"][0] != second["volumes"][0] and first["ports"] != second["ports"]  # a home and a port each
    assert first["volumes"][1] == second["volumes"][1] == "workspace:/workspace"
    env = first["environment"]
    assert set(compose_environment()) <= set(env)  # what the one-instance file passes, and the database
    url = env["CHATGATE_STORAGE__URL"].replace("${POSTGRES_PASSWORD:?set POSTGRES_PASSWORD}", "s3cret")
    config = load_config(env={**gateway_env(tmp_path, None), "CHATGATE_STORAGE__URL": url,
                              "CHATGATE_AGENT__WORKSPACE": env["CHATGATE_AGENT__WORKSPACE"]})
    assert config.database_url == "postgresql://chatgate:s3cret@postgres:5432/chatgate"
    assert str(config.agent.workspace) == "/workspace"
    assert "${POSTGRES_PASSWORD:?" in compose["services"]["postgres"]["environment"]["POSTGRES_PASSWORD"]
    proxy = compose["services"]["proxy"]
    assert proxy["volumes"] == ["./Caddyfile.instances:/etc/caddy/Caddyfile:ro"]
    caddyfile = (DEPLOY / "Caddyfile.instances").read_text()
    assert "reverse_proxy chatgate-a:8765 chatgate-b:8765" in caddyfile  # webhooks to either instance
    assert "lb_policy cookie" in caddyfile and "health_uri /readyz" in caddyfile  # a tab stays with its instance


def test_the_image_is_multi_stage_unprivileged_and_checks_readiness():
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    assert len(re.findall(r"^FROM ", dockerfile, re.M)) == 2
    assert re.search(r"^USER chatgate$", dockerfile, re.M)
    assert re.search(r"^HEALTHCHECK .*\n.*/readyz", dockerfile, re.M)
    assert re.search(r"^STOPSIGNAL SIGTERM$", dockerfile, re.M)
    assert 'CMD ["chatgate", "run"]' in dockerfile and "CHATGATE_HOME=/data" in dockerfile


def test_the_shipped_unit_is_the_one_service_install_writes():
    committed = (DEPLOY / "chatgate.service").read_text()
    assert committed == shipped_unit(), "deploy/chatgate.service differs from gateway/ops/unit.py: make deploy-files"


def test_the_shipped_unit_is_notify_with_a_watchdog_and_systemd_accepts_it(tmp_path):
    text = (DEPLOY / "chatgate.service").read_text()
    lines = text.splitlines()
    for line in ("Type=notify", "WatchdogSec=30", "SyslogIdentifier=chatgate", "User=chatgate",
                 f"RestartPreventExitStatus={EXIT_HOME_IN_USE}", f"RestartPreventExitStatus={EXIT_REFUSED}",
                 "EnvironmentFile=-/var/lib/chatgate/env", "StateDirectory=chatgate"):
        assert line in lines, line
    unit = tmp_path / "chatgate.service"  # (the interpreter it names is not installed here: this one is)
    unit.write_text(text.replace("/opt/chatgate/.venv/bin/python", sys.executable))
    checked = verify(unit)
    assert checked.returncode == 0 and checked.stderr.strip() == "", checked.stderr


def pinned() -> dict[str, str]:
    lines = (DEPLOY / "constraints.txt").read_text().splitlines()
    pins = [line.split("==") for line in lines if line and not line.startswith("#")]
    assert all(len(pin) == 2 and pin[1] for pin in pins), "each line: name==version"
    return dict(pins)


def test_the_image_and_make_install_use_the_pinned_versions():
    dockerfile, makefile = (DEPLOY / "Dockerfile").read_text(), (DEPLOY.parent / "Makefile").read_text()
    assert "COPY deploy/constraints.txt" in dockerfile and "-c deploy/constraints.txt '.[all]'" in dockerfile
    assert "PINS   := -c deploy/constraints.txt" in makefile
    assert re.search(r"^install:.*\n\t.*pip install -q \$\(PINS\) -e '\.\[all\]'", makefile, re.M)
    assert "pydantic" in pinned() and "python-telegram-bot" in pinned()


def test_every_pinned_package_is_one_chatgate_all_needs():
    spec = importlib.util.spec_from_file_location("pin_versions", DEPLOY / "pin_versions.py")
    pin_versions = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(pin_versions)
    needed = pin_versions.needed()
    assert "pytest" not in needed and "chatgate" not in needed  # (the dev tools are not the service's)
    assert sorted(pinned()) == sorted(needed), "deploy/constraints.txt is stale: make constraints"


def test_the_documented_docker_run_reaps_orphans():
    assert "docker run -d --init " in (DEPLOY / "Dockerfile").read_text()
    assert yaml.safe_load((DEPLOY / "compose.yaml").read_text())["services"]["chatgate"]["init"] is True
    runs = [line for line in (DEPLOY.parent / "README.md").read_text().splitlines() if "docker run " in line]
    assert runs and all("docker run -d --init " in line for line in runs), runs
