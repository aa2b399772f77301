"""`chatgate doctor` names every weaker setting in force, each with what it gives up: no sandbox,
root, classifier-only commands, no approvals, the sandbox's network, a workspace holding the state."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.harness import gateway_env
from tests.readable_install import readable_install

AS_ROOT = os.geteuid() == 0
REPO = Path(__file__).resolve().parents[1]


def doctor(home: Path, *, as_nobody: Path | None = None, path: str | None = None, **settings: object) -> list[str]:
    """`chatgate doctor`'s report lines (no LLM configured: that line fails, it is not looked at).
    `as_nobody`: run as nobody, by the Python of that readable install (`tests.readable_install`)."""
    env = {**os.environ, **gateway_env(home, None, **settings)}
    if path is not None:
        env["PATH"] = path
    argv = [sys.executable, "-m", "gateway", "doctor"]
    cwd = REPO
    if as_nobody is not None:
        argv = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", str(as_nobody), "-m", "gateway",
                "doctor"]
        env["HOME"], cwd = str(home), as_nobody.parent
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60, cwd=cwd, check=False)
    assert done.returncode == 1 and "problems found" in done.stdout, done.stdout + done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    return done.stdout.splitlines()


def line(lines: list[str], start: str) -> str:
    found = [x for x in lines if x.startswith(start)]
    assert len(found) == 1, f"no single line starts with {start!r}: {lines}"
    return found[0]


def test_no_sandbox_classifier_only_no_approvals_and_a_workspace_holding_the_state(tmp_path: Path):
    lines = doctor(tmp_path / "home", agent__sandbox__mode="off", agent__sandbox__unconfined="classifier",
                   approvals__mode="off", agent__workspace=tmp_path)
    assert "only the approval checks stand in between" in line(lines, "[warn] tool sandbox: off")
    assert "now (no sandbox), a command the classifier calls safe runs unasked" in \
        line(lines, "[warn] agent.sandbox.unconfined: classifier")
    assert "without asking anyone" in line(lines, "[warn] approvals.mode: off")
    assert "chatgate run refuses to start" in line(lines, f"[FAIL] agent.workspace {tmp_path} contains chatgate's state")
    if AS_ROOT:
        assert "run it as an ordinary user" in line(lines, "[warn] chatgate runs as root")


def test_auto_without_bubblewrap_and_the_sandbox_network_on(tmp_path: Path):
    nothing = tmp_path / "empty-path"
    nothing.mkdir()
    lines = doctor(tmp_path / "home", path=str(nothing), agent__sandbox__network="on")
    assert "apt-get install bubblewrap" in line(lines, "[warn] tool sandbox: NOT available")
    assert "sent anywhere without a person's yes" in line(lines, "[warn] agent.sandbox.network: on")
    assert not any(x.startswith("[FAIL] agent.workspace") for x in lines)


def test_the_default_settings_have_no_weak_setting_but_root(tmp_path: Path):
    lines = doctor(tmp_path / "home")
    assert line(lines, "[ ok ] tool sandbox:") == \
        "[ ok ] tool sandbox: bubblewrap, network off, no capabilities, no user namespaces of its own"
    warned = [x for x in lines if x.startswith(("[warn]", "[FAIL]")) and not x.startswith("[FAIL] llm")]
    assert len(warned) == AS_ROOT and all(x.startswith("[warn] chatgate runs as root") for x in warned), warned


@pytest.mark.skipif(not AS_ROOT or shutil.which("setpriv") is None, reason="needs root to become nobody")
def test_as_an_ordinary_user_nothing_is_said_about_root(tmp_path: Path):
    home = Path(tempfile.mkdtemp(prefix="chatgate-doctor-"))
    try:
        home.chmod(0o777)
        python = readable_install(home / "install")  # (the checkout may lie where nobody cannot read)
        lines = doctor(home / "state", as_nobody=python)
        assert line(lines, "[ ok ] tool sandbox:").endswith("no capabilities, no user namespaces of its own")
        assert not any("root" in x for x in lines), lines
    finally:
        shutil.rmtree(home, ignore_errors=True)


def test_the_doctor_shows_the_llm_address_without_its_credentials(tmp_path: Path):
    home = tmp_path / "home"
    env = {**os.environ, **gateway_env(home, "http://ann:hunter2-pass@127.0.0.1:9/v1?key=sk-querysecret")}
    done = subprocess.run([sys.executable, "-m", "gateway", "doctor"], capture_output=True, text=True, env=env,
                          timeout=60, cwd=REPO, check=False)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "llm: http://127.0.0.1:9/v1, model" in done.stdout
    assert "hunter2" not in done.stdout + done.stderr and "sk-querysecret" not in done.stdout + done.stderr
