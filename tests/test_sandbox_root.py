"""The sandbox as root (how these tests and CI run) and as nobody: what hides chatgate's state stays
in place whatever a command tries — `umount`, a bind mount of `/`, a user namespace of its own,
`/proc/1/root`, `nsenter`, `chroot`, a setuid `umount` — and bubblewrap without `--disable-userns`
still drops every capability."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Iterator

import pytest

from agent.safety import sandbox as sandbox_module
from agent.safety.sandbox import Sandbox
from tests.fakes.llm import FakeLLM, Reply
from tests.harness import Tab, start_gateway

MARKER = "config-marker-5b1e"  # a line of config.yaml that is no secret value (nothing redacts it)
AS_ROOT = os.geteuid() == 0


@pytest.fixture
def place() -> Iterator[Path]:
    """A folder anyone may enter (for the same checks as nobody), holding a CHATGATE_HOME whose
    config can be read by everyone: only the sandbox's hiding keeps it from a command."""
    root = Path(tempfile.mkdtemp(prefix="chatgate-sandbox-"))
    try:
        root.chmod(0o755)
        (root / "home" / "workspace").mkdir(parents=True)
        (root / "home" / "workspace").chmod(0o777)
        (root / "home").chmod(0o755)
        (root / "home" / "config.yaml").write_text(f"# {MARKER}\napprovals:\n  mode: ask\n")
        (root / "home" / "config.yaml").chmod(0o644)
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def outside() -> Iterator[Path]:
    """A folder outside /tmp, /root, /home and /run (which the sandbox hides always)."""
    for parent in ("/srv", "/opt", "/var/lib", "/mnt"):
        if os.access(parent, os.W_OK):
            folder = Path(tempfile.mkdtemp(prefix="chatgate-test-", dir=parent))
            try:
                yield folder
            finally:
                shutil.rmtree(folder, ignore_errors=True)
            return
    pytest.skip("no writable folder outside /tmp, /root, /home and /run")


def contained(box: Sandbox, workspace: Path, command: str, *, as_nobody: bool = False) -> str:
    """What `command` prints inside the sandbox (stdout and stderr), run as we are or as nobody."""
    argv = box.wrap(["sh", "-c", command], workspace)
    if as_nobody:
        argv = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *argv]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30, cwd=workspace, check=False)
    return done.stdout + done.stderr


TRICKS = [
    "umount -l /tmp; umount -l {home}; cat {home}/config.yaml",
    "umount {home} && cat {home}/config.yaml",
    "mount --bind / /mnt && cat /mnt{home}/config.yaml",
    "mount --rbind / /mnt && umount -l /mnt/tmp; cat /mnt{home}/config.yaml",
    "unshare -Urm sh -c 'umount -l /tmp; umount -l {home}; cat {home}/config.yaml'",
    "unshare -Um sh -c 'umount -l {home}; cat {home}/config.yaml'",
    "cat /proc/1/root{home}/config.yaml; chroot /proc/1/root cat {home}/config.yaml",
    "nsenter -t 1 -m -U cat {home}/config.yaml",
]


@pytest.mark.parametrize("as_nobody", [False, True], ids=["as-us", "as-nobody"])
@pytest.mark.parametrize("trick", TRICKS)
def test_no_trick_undoes_the_hiding(place: Path, trick: str, as_nobody: bool):
    home = place / "home"
    box = Sandbox("bwrap", hidden=[home])
    assert box.active, box.describe()
    out = contained(box, home / "workspace", trick.format(home=home) + "; echo tried", as_nobody=as_nobody)
    assert "tried" in out  # it ran
    assert MARKER not in out, out


@pytest.mark.parametrize("as_nobody", [False, True], ids=["as-us", "as-nobody"])
def test_a_command_has_no_capabilities_no_new_privileges_and_no_user_namespace_of_its_own(place: Path,
                                                                                          as_nobody: bool):
    box = Sandbox("bwrap", hidden=[place / "home"])
    out = contained(box, place / "home" / "workspace",
                    "grep -E '^(CapEff|CapBnd|NoNewPrivs)' /proc/self/status; "
                    "unshare -U true && echo made-a-user-namespace", as_nobody=as_nobody)
    assert "CapEff:\t0000000000000000" in out and "CapBnd:\t0000000000000000" in out, out
    assert "NoNewPrivs:\t1" in out
    assert "made-a-user-namespace" not in out
    assert "no user namespaces of its own" in box.describe()


def test_without_disable_userns_capabilities_still_go_and_it_says_what_is_missing(place: Path, monkeypatch,
                                                                                    caplog):
    """An older bubblewrap (before 0.8) rejects --disable-userns: the sandbox works without it, says so."""
    real = shutil.which("bwrap")
    older = place / "bwrap-0.7"
    older.write_text("#!/bin/sh\nfor a in \"$@\"; do [ \"$a\" = --disable-userns ] && "
                     "{ echo 'bwrap: Unknown option --disable-userns' >&2; exit 1; }; done\n"
                     f"exec {real} \"$@\"\n")
    older.chmod(0o755)
    monkeypatch.setattr(sandbox_module, "_bwrap", lambda: str(older))
    home = place / "home"
    box = Sandbox("auto", hidden=[home])
    assert box.active, box.describe()
    assert "Unknown option --disable-userns" in box.describe() and "user namespaces of their own" in box.weaker
    assert any("user namespaces of their own" in r.getMessage() and r.levelname == "WARNING" for r in caplog.records)
    out = contained(box, home / "workspace", f"grep CapEff /proc/self/status; {TRICKS[0].format(home=home)}")
    assert "CapEff:\t0000000000000000" in out and MARKER not in out, out


def test_a_hidden_file_cannot_be_opened_and_its_folder_stays(outside: Path, place: Path):
    config = outside / "chatgate.yaml"
    config.write_text(f"# {MARKER}\n")
    (outside / "hosts.sample").write_text("127.0.0.1 localhost\n")
    box = Sandbox("bwrap", hidden=[config])
    out = contained(box, place / "home" / "workspace",
                    f"cat {config}; cat {outside}/hosts.sample; echo x > {config} || echo refused")
    assert MARKER not in out and "127.0.0.1 localhost" in out and "refused" in out, out
    assert config.read_text() == f"# {MARKER}\n"


@pytest.mark.skipif(not AS_ROOT, reason="the hole was root's capabilities")
async def test_as_root_a_script_from_the_model_cannot_unmount_its_way_to_the_config(tmp_path: Path, llm: FakeLLM):
    """Through the daemon: the model writes a script that lifts the hiding, and runs it (no approval
    needed: in the sandbox, running workspace code is the sandbox's business)."""
    (tmp_path / "config.yaml").write_text(f"# {MARKER}\ngateway:\n  drain_seconds: 2\n")
    script = (f"umount -l /tmp; umount -l {tmp_path}\n"
              f"cat {tmp_path}/config.yaml\n"
              "grep CapEff /proc/self/status\n"
              "unshare -U true && echo made-a-user-namespace\n"
              "echo script-done\n")
    llm.script(Reply.tool_calls([("write_file", {"path": "run.sh", "content": script})]),
               Reply.tool_calls([("terminal", {"command": "sh run.sh"})]), Reply.text("ran it"))
    runner = await start_gateway(tmp_path, llm.base_url)
    try:
        assert runner.parts.sandbox.active
        async with Tab(runner) as tab:
            await tab.say("run my script")
            assert await tab.reply() == "ran it"
        result = next(m["content"] for m in llm.requests[-1]["messages"] if m.get("role") == "tool"
                      and "script-done" in m["content"])
        assert MARKER not in result and "made-a-user-namespace" not in result, result
        assert "CapEff:\t0000000000000000" in result
    finally:
        await runner.stop()
