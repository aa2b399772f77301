"""The system toolset: the shell (guard, approval, timeout, output cap, env, secrets) and the file tools."""

from __future__ import annotations

import asyncio
import json
import os
import stat
import time
from pathlib import Path

import pytest

from agent.safety.classifier import classify
from agent.safety.sandbox import Sandbox
from agent.tools import ApprovalOutcome, ApprovalRequest, ToolContext, ToolRegistry
from agent.tools.system import MAX_READ_BYTES, system_tools

SECRET = "s3cr3t-value-1234567"


class FakeApprovals:
    """Records what was asked and answers as configured."""

    def __init__(self, approved: bool) -> None:
        self.approved = approved
        self.requests: list[ApprovalRequest] = []

    async def request(self, ctx: ToolContext, request: ApprovalRequest) -> ApprovalOutcome:
        self.requests.append(request)
        if self.approved:
            return ApprovalOutcome(True, "once", "Approved once by the user.")
        return ApprovalOutcome(False, "denied", "The user denied this.")


def make(workspace: Path, **kwargs):
    tools = {t.name: t for t in system_tools(workspace, secrets=[SECRET], **kwargs)}

    async def call(name: str, ctx: ToolContext | None = None, **arguments) -> str:
        return await tools[name].handler(ctx or ToolContext(), **arguments)

    return call


def ctx_with(port: FakeApprovals | None) -> ToolContext:
    return ToolContext(platform="test", chat_id="c", user_id="u", approvals=port)


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")  # a zombie is dead, only not reaped yet


async def wait_gone(pid: int, within: float = 3.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not alive(pid):
            return True
        await asyncio.sleep(0.05)
    return not alive(pid)


async def wait_file(path: Path, within: float = 5.0) -> str:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().strip():
            return path.read_text().strip()
        await asyncio.sleep(0.02)
    raise AssertionError(f"{path} never appeared")


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    return tmp_path / "ws"  # not created: the tools create it


# --- schemas ---------------------------------------------------------------------------------------

async def test_schemas_and_registry(ws: Path) -> None:
    tools = system_tools(ws)
    assert [t.name for t in tools] == ["terminal", "read_file", "write_file", "patch_file", "send_file"]
    assert {t.toolset for t in tools} == {"system"}
    required = {t.name: t.parameters["required"] for t in tools}
    assert required == {"terminal": ["command"], "read_file": ["path"], "write_file": ["path", "content"],
                        "patch_file": ["path", "old", "new"], "send_file": ["path"]}
    assert [t.name for t in tools if t.side_effects] == ["terminal", "write_file", "patch_file"]
    for t in tools:
        assert t.schema()["function"]["description"]
        for name, spec in t.parameters["properties"].items():
            assert spec.get("description"), (t.name, name)
    scope = ToolRegistry(tools).scope(toolsets=["system"])
    out = await scope.call("terminal", json.dumps({"command": "echo via-scope"}), ToolContext())
    assert out == "exit code 0\nvia-scope\n"


# --- terminal --------------------------------------------------------------------------------------

async def test_safe_command_runs_in_workspace(ws: Path) -> None:
    call = make(ws)
    out = await call("terminal", command="pwd")
    assert out == f"exit code 0\n{os.path.realpath(ws)}\n"
    out = await call("terminal", command="echo hi > f.txt; echo err >&2; exit 3")
    assert out == "exit code 3\nerr\n"
    assert (ws / "f.txt").read_text() == "hi\n"
    assert await call("terminal", command="true") == "exit code 0\n(no output)"


async def test_no_stdin(ws: Path) -> None:
    call = make(ws, timeout=5)
    out = await call("terminal", command="cat; echo done")
    assert out == "exit code 0\ndone\n"  # cat read an empty stdin: no timeout


@pytest.mark.parametrize("approved", [True, False])
async def test_dangerous_command_needs_approval(ws: Path, approved: bool) -> None:
    call = make(ws)
    (ws / "somedir" / "inner").mkdir(parents=True)
    command = "rm -rf somedir"
    assert classify(command).verdict == "dangerous"
    port = FakeApprovals(approved)
    out = await call("terminal", ctx_with(port), command=command)
    assert len(port.requests) == 1
    request = port.requests[0]
    assert (request.kind, request.subject) == ("command", command)
    assert request.reasons == tuple(classify(command).reasons) and request.reasons
    if approved:
        assert out == "Approved once by the user.\nexit code 0\n(no output)"  # the model hears who allowed it
        assert not (ws / "somedir").exists()
    else:
        assert "The user denied this." in out and "NOT run" in out
        assert (ws / "somedir" / "inner").is_dir()


async def test_dangerous_command_without_port_is_refused(ws: Path) -> None:
    call = make(ws)
    (ws / "somedir").mkdir(parents=True)
    out = await call("terminal", ctx_with(None), command="rm -rf somedir")
    assert "needs a person's approval and nobody can approve here" in out
    assert "NOT run" in out
    assert (ws / "somedir").is_dir()


async def test_approval_prompt_never_shows_a_secret(ws: Path) -> None:
    call = make(ws)
    (ws / "somedir").mkdir(parents=True)
    port = FakeApprovals(False)
    await call("terminal", ctx_with(port), command=f"rm -rf somedir {SECRET}")
    assert port.requests and SECRET not in port.requests[0].subject
    assert "***" in port.requests[0].subject
    assert not any(SECRET in reason for reason in port.requests[0].reasons)


@pytest.mark.parametrize("command", ["rm -rf /", ":(){ :|:& };:"])
async def test_hardline_never_asks_never_runs(ws: Path, command: str) -> None:
    assert classify(command).verdict == "hardline"  # guard first: never run these for real
    call = make(ws)
    port = FakeApprovals(True)
    out = await call("terminal", ctx_with(port), command=command)
    assert port.requests == []
    assert out.startswith("refused:") and "NOT run" in out
    for reason in classify(command).reasons:
        assert reason in out
    assert not ws.exists() or list(ws.iterdir()) == []


async def test_timeout_kills_the_whole_process_group(ws: Path) -> None:
    call = make(ws, sandbox=Sandbox("off"), unconfined="classifier")  # host pids, no asking (see test_sandbox.py)
    out = await asyncio.wait_for(  # it returns at the timeout, not when the sleeps end
        call("terminal", command="sleep 30 & echo $! > child.pid; echo started; sleep 30", timeout=1), 5)
    assert out == "timed out after 1 s; the process was killed\nstarted\n"
    assert await wait_gone(int((ws / "child.pid").read_text()))


async def test_background_leftovers_do_not_hang_or_survive(ws: Path) -> None:
    call = make(ws, sandbox=Sandbox("off"), unconfined="classifier")  # host pids, no asking (see test_sandbox.py)
    out = await asyncio.wait_for(  # the left-over sleep does not hold the result back
        call("terminal", command="sleep 30 & echo $! > child.pid; echo started", timeout=20), 5)
    assert out == "exit code 0\nstarted\n"
    assert await wait_gone(int((ws / "child.pid").read_text()))


async def test_cancellation_kills_the_process_group(ws: Path) -> None:
    call = make(ws, sandbox=Sandbox("off"), unconfined="classifier")  # host pids, no asking (see test_sandbox.py)
    task = asyncio.create_task(call("terminal", command="echo $$ > shell.pid; sleep 30 & echo $! > child.pid; wait"))
    child = int(await wait_file(ws / "child.pid"))
    shell = int(await wait_file(ws / "shell.pid"))
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await wait_gone(child) and await wait_gone(shell)


async def test_output_is_capped_head_and_tail(ws: Path) -> None:
    call = make(ws, output_limit=1000)
    out = await call("terminal", command="seq 1 100000")
    total = len("".join(f"{i}\n" for i in range(1, 100001)))
    assert out.startswith("exit code 0\n1\n2\n3\n")
    assert out.rstrip().endswith("99999\n100000")
    assert f"\n[… {total - 1000} characters cut …]\n" in out
    assert len(out) < 1100

    out = await call("terminal", command="head -c 1500 /dev/zero | tr '\\0' a")
    assert out == "exit code 0\n" + "a" * 500 + "\n[… 500 characters cut …]\n" + "a" * 500


async def test_env_is_stripped_of_credentials(ws: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    dropped = {"CHATGATE_X": "1", "MY_API_KEY": "k", "SOME_TOKEN": "t", "db_password": "p",
               "OPENAI_BASE_URL": "http://x", "TELEGRAM_BOT_TOKEN": "123:abc", "AWS_SECRET_ACCESS_KEY": "a",
               "INNOCENT_NAME": f"prefix-{SECRET}-suffix"}
    for name, value in dropped.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("KEEP_ME", "visible")
    out = await make(ws)("terminal", command="env")
    names = {line.split("=", 1)[0] for line in out.splitlines()[1:] if "=" in line}
    assert not names & set(dropped)
    assert "PATH" in names and "KEEP_ME=visible" in out
    assert SECRET not in out


async def test_secrets_are_redacted_from_output(ws: Path) -> None:
    out = await make(ws)("terminal", command=f"echo 'key={SECRET}'; echo {SECRET} >&2")
    assert out == "exit code 0\nkey=***\n***\n"


async def test_secret_cut_by_the_output_cap_leaks_no_piece(ws: Path) -> None:
    # many secrets early shrink the head once redacted; one cut at the head buffer's end must not show
    text = SECRET * 8 + "a" * 30 + SECRET
    out = await make(ws, output_limit=200)("terminal",
                                           command=f"printf '%s' '{text}'; head -c 10000 /dev/zero | tr '\\0' b")
    assert "characters cut" in out
    assert SECRET[:5] not in out and SECRET[-5:] not in out


# --- files -----------------------------------------------------------------------------------------

async def test_write_then_read(ws: Path) -> None:
    call = make(ws)
    out = await call("write_file", path="sub/dir/a.txt", content="one\ntwo\n")
    assert out == "wrote 8 characters (2 lines) to sub/dir/a.txt"
    assert (ws / "sub/dir/a.txt").read_text() == "one\ntwo\n"
    assert await call("read_file", path="sub/dir/a.txt") == "     1\tone\n     2\ttwo"
    assert await call("read_file", path="sub/../sub/dir/a.txt", offset=1) == "     2\ttwo"
    assert "past the end" in await call("read_file", path="sub/dir/a.txt", offset=5)


async def test_read_pages(ws: Path) -> None:
    ws.mkdir()
    (ws / "ten.txt").write_text("".join(f"line {i}\n" for i in range(1, 11)))
    call = make(ws)
    out = await call("read_file", path="ten.txt", offset=2, limit=3)
    assert out.splitlines() == ["     3\tline 3", "     4\tline 4", "     5\tline 5",
                                "[lines 3–5 of 10; call read_file with offset=5 to read on]"]
    # the output budget pages by whole lines too
    (ws / "many.txt").write_text("x" * 50 + "\n" + "".join(f"{i}\n" for i in range(1000)))
    out = await make(ws, output_limit=300)("read_file", path="many.txt")
    assert len(out) < 400 and "call read_file with offset=" in out


async def test_read_errors(ws: Path) -> None:
    ws.mkdir()
    call = make(ws)
    assert "no such file" in await call("read_file", path="nope.txt")
    (ws / "d").mkdir()
    assert "is a directory" in await call("read_file", path="d")
    (ws / "blob.bin").write_bytes(b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR")
    assert "binary" in await call("read_file", path="blob.bin")
    (ws / "latin1.txt").write_bytes("café".encode("latin-1"))
    assert "not UTF-8" in await call("read_file", path="latin1.txt")
    (ws / "big.txt").write_bytes(b"a" * (MAX_READ_BYTES + 1))
    out = await call("read_file", path="big.txt")
    assert out.startswith("error:") and "2 MB" in out


async def test_results_never_echo_secrets(ws: Path) -> None:
    call = make(ws)
    out = await call("write_file", path="cfg.env", content=f"TOKEN={SECRET}\n")
    assert SECRET not in out
    assert (ws / "cfg.env").read_text() == f"TOKEN={SECRET}\n"  # the user's machine: written as asked
    assert await call("read_file", path="cfg.env") == "     1\tTOKEN=***"
    out = await call("patch_file", path="cfg.env", old=SECRET, new=SECRET + "-2")
    assert SECRET not in out and (ws / "cfg.env").read_text() == f"TOKEN={SECRET}-2\n"


async def test_patch_file(ws: Path) -> None:
    ws.mkdir()
    f = ws / "code.py"
    f.write_text("a = 1\nb = 2\nb = 2\n")
    call = make(ws)
    assert await call("patch_file", path="code.py", old="a = 1", new="a = 10") == \
        "replaced 1 occurrence in code.py (at line 1)"
    out = await call("patch_file", path="code.py", old="zzz", new="y")
    assert out.startswith("error:") and "not found" in out
    out = await call("patch_file", path="code.py", old="b = 2", new="b = 3")
    assert out.startswith("error:") and "2 times" in out
    assert f.read_text() == "a = 10\nb = 2\nb = 2\n"
    assert await call("patch_file", path="code.py", old="b = 2", new="b = 3", count=2) == \
        "replaced 2 occurrences in code.py (first at line 2)"
    assert await call("patch_file", path="code.py", old="3", new="4", count=0) == \
        "replaced 2 occurrences in code.py (first at line 2)"
    assert f.read_text() == "a = 10\nb = 4\nb = 4\n"
    assert "must not be empty" in await call("patch_file", path="code.py", old="", new="x")
    assert "no such file" in await call("patch_file", path="missing.py", old="a", new="b")


async def test_atomic_write_leaves_no_temp_files(ws: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ws.mkdir()
    f = ws / "run.sh"
    f.write_text("old\n")
    f.chmod(0o750)
    call = make(ws)
    await call("write_file", path="run.sh", content="new\n")
    await call("patch_file", path="run.sh", old="new", new="newer")
    assert f.read_text() == "newer\n" and stat.S_IMODE(f.stat().st_mode) == 0o750
    assert sorted(p.name for p in ws.iterdir()) == ["run.sh"]

    def broken_replace(src, dst, **dir_fds):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", broken_replace)
    out = await call("write_file", path="run.sh", content="half")
    assert out.startswith("error:") and "No space left" in out
    assert f.read_text() == "newer\n"
    assert sorted(p.name for p in ws.iterdir()) == ["run.sh"]


@pytest.mark.parametrize("how", ["dotdot", "absolute", "symlink"])
async def test_paths_outside_need_approval(tmp_path: Path, ws: Path, how: str) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "notes.txt").write_text("private\n")
    ws.mkdir()
    if how == "symlink":
        (ws / "link").symlink_to(outside)
    path = {"dotdot": "../outside/notes.txt", "absolute": str(outside / "notes.txt"),
            "symlink": "link/notes.txt"}[how]
    real = os.path.realpath(outside / "notes.txt")
    call = make(ws)

    denied = FakeApprovals(False)
    out = await call("read_file", ctx_with(denied), path=path)
    assert "The user denied this." in out and "NOT read" in out and "private" not in out
    out = await call("write_file", ctx_with(denied), path=path, content="overwritten\n")
    assert "NOT written" in out
    out = await call("patch_file", ctx_with(denied), path=path, old="private", new="public")
    assert "NOT changed" in out
    assert [(r.kind, r.subject, r.reasons) for r in denied.requests] == [
        ("file", f"{verb} {real}", ("outside the workspace",)) for verb in ("read", "write", "patch")]
    assert (outside / "notes.txt").read_text() == "private\n"

    out = await call("write_file", ctx_with(None), path=path, content="x")
    assert "nobody can approve here" in out and (outside / "notes.txt").read_text() == "private\n"

    approved = FakeApprovals(True)
    assert await call("read_file", ctx_with(approved), path=path) == "     1\tprivate"
    assert await call("patch_file", ctx_with(approved), path=path, old="private", new="public") == \
        f"replaced 1 occurrence in {real} (at line 1)"
    assert (outside / "notes.txt").read_text() == "public\n"


async def test_links_and_dotdots_that_stay_inside_need_no_approval(ws: Path) -> None:
    (ws / "real").mkdir(parents=True)
    (ws / "real" / "f.txt").write_text("inside\n")
    (ws / "alias").symlink_to(ws / "real")
    port = FakeApprovals(False)
    call = make(ws)
    assert await call("read_file", ctx_with(port), path="alias/f.txt") == "     1\tinside"
    assert await call("read_file", ctx_with(port), path="real/../alias/./f.txt") == "     1\tinside"
    assert await call("write_file", ctx_with(port), path="alias/g.txt", content="g") == \
        "wrote 1 character (1 line) to real/g.txt"
    assert (ws / "alias").is_symlink() and port.requests == []
