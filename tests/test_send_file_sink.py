"""The sink behind `send_file` (`gateway.chat.files.Outgoing`): a private copy per file, made when the
tool runs, bounded in size and number; links, FIFOs and folders refused without hanging."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from agent.safety.beneath import Refused
from agent.tools import ToolContext
from agent.tools.system import system_tools
from gateway.chat.files import MAX_FILES_PER_REPLY, OUTGOING, Outgoing, discard
from tests.harness import Approver

REPORT = b"a,b\n1,2\n"


def setup(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "report.csv").write_bytes(REPORT)
    return ws


def copies(home: Path) -> list[Path]:
    return [p for p in (home / OUTGOING).rglob("*") if not p.is_dir()] if (home / OUTGOING).exists() else []



def send_tool(home: Path, ws: Path):
    tool = {t.name: t for t in system_tools(ws)}["send_file"]
    sink = Outgoing(home)

    async def send(path: str) -> str:
        return await tool.handler(ToolContext(files=sink, approvals=Approver(approved=True)), path=path)

    return send, sink


async def test_the_copy_is_private_and_what_the_file_held_then(tmp_path: Path):
    ws = setup(tmp_path)
    send, sink = send_tool(tmp_path, ws)
    assert "will be sent" in await send("report.csv")
    (ws / "report.csv").write_text("changed afterwards")
    [entry] = sink.entries
    copy = Path(entry["copy"])
    assert copy.read_bytes() == REPORT and copy.name == "report.csv"
    assert copy.is_relative_to(tmp_path / OUTGOING) and not copy.is_relative_to(ws)
    assert stat.S_IMODE(os.stat(tmp_path / OUTGOING).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(copy.parent.parent).st_mode) == 0o700 and stat.S_IMODE(copy.stat().st_mode) == 0o600
    assert entry["name"] == "report.csv" and entry["where"] == str(ws.resolve() / "report.csv")
    assert json.loads(json.dumps(sink.entries)) == sink.entries  # (kept in the outbox as JSON)


async def test_links_fifos_and_oversized_files_are_refused_without_hanging(tmp_path: Path):
    ws = setup(tmp_path)
    send, sink = send_tool(tmp_path, ws)
    os.mkfifo(ws / "pipe")
    (ws / "sub").mkdir()
    (ws / "sub" / "x.txt").write_text("x")
    (ws / "linked").symlink_to(ws / "sub")
    with open(ws / "huge.bin", "wb") as fh:
        fh.truncate(60 * 1024 * 1024)  # sparse: nothing is read to refuse it
    assert "not a regular file" in await send("pipe")
    assert "50 MB" in await send("huge.bin")
    assert "error" in await send("sub")
    assert "will be sent" in await send("linked/x.txt")  # resolved first: the real path, opened with no link
    assert [e["where"] for e in sink.entries] == [str(ws.resolve() / "sub" / "x.txt")]


async def test_a_reply_carries_a_bounded_number_of_files(tmp_path: Path):
    ws = setup(tmp_path)
    send, sink = send_tool(tmp_path, ws)
    for n in range(MAX_FILES_PER_REPLY + 1):
        (ws / f"f{n}.txt").write_text(str(n))
    for n in range(MAX_FILES_PER_REPLY):
        assert "will be sent" in await send(f"f{n}.txt")
    assert "at most" in await send(f"f{MAX_FILES_PER_REPLY}.txt")
    assert "will be sent" in await send("f0.txt")  # the same file again: the newer copy replaces the first
    assert len(sink.entries) == MAX_FILES_PER_REPLY and len(copies(tmp_path)) == MAX_FILES_PER_REPLY


def test_the_sink_refuses_a_planted_outgoing_link(tmp_path: Path):
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / OUTGOING).symlink_to(tmp_path / "elsewhere")
    sink = Outgoing(tmp_path)
    with pytest.raises(Refused):
        sink._turn_folder()


async def test_discard_removes_only_copies_of_ours(tmp_path: Path):
    ws = setup(tmp_path)
    send, sink = send_tool(tmp_path, ws)
    assert "will be sent" in await send("report.csv")
    turn = Path(sink.entries[0]["copy"]).parent.parent
    foreign = {"copy": str(ws / "report.csv"), "name": "report.csv", "where": str(ws / "report.csv")}
    discard([*sink.entries, foreign, str(ws / "report.csv")])
    assert not turn.exists() and (tmp_path / OUTGOING).is_dir()
    assert (ws / "report.csv").read_bytes() == REPORT  # an entry that is not a copy of ours is left alone
