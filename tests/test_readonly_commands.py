"""The read-only list for commands without a sandbox (`agent.safety.readonly_commands`): what keeps a
command off it — shell syntax it cannot prove harmless, options it does not name, a path that
resolves outside the workspace, a program found in the workspace, a git repository that can run
a program. (Through the daemon: test_unconfined_allowlist.py.)"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from agent.safety.readonly_commands import not_read_only, split
from tests.test_unconfined_allowlist import git_repo

@pytest.mark.parametrize(("command", "why"), [
    ("cat $HOME/x", "`$`"), ("cat \"$HOME\"", "`$` inside double quotes"), ("echo `id`", "(an expansion"),
    ("cat $(pwd)/x", "`$`"), ("(cat x)", "`(`"), ("{ cat x; }", "`{`"), ("cat x{,y}", "`{`"),
    ("cat < x", "`<`"), ("cat x > y", "redirection"), ("cat x >> y", "redirection"), ("cat x 1>&2", "redirection"),
    ("cat x 3>/dev/null", "redirection"), ("cat x2>/dev/null", "redirection"), ("cat x &> y", "`&`"),
    ("cat x &", "`&`"), ("cat x\nid", "line break"), ("cat <<EOF\nx\nEOF", "line break"), ("cat *", "glob"),
    ("cat ?.txt", "glob"), ("cat [ab]", "glob"), ("cat ~/x", "`~`"), ("ls ~", "`~`"), ("grep --include=~/x y", "`~`"),
    ("X=1 cat x", "`X=1` is not on it"), ("cat x # comment", "`#`"), ("cat x |& cat", "`|&`"), ("cat x ;; ls", "`;;`"),
    ("ls &&", "empty command"), ("| ls", "empty command"), ("cat 'x", "not closed"), ("cat x\\", "backslash"),
    ("rg --pre sh x", "`rg` is not on it"), ("less x", "`less`"), ("more x", "`more`"), ("man ls", "`man`"),
    ("grep -f /etc/x y", "`-f`"), ("grep -R x .", "`-R`"), ("grep --exclude-from=f x", "`--exclude-from=f`"),
    ("wc --files0-from=f", "--files0-from"), ("wc --files0=f", "--files0"), ("sort -o y x", "`-o`"),
    ("sort --compress-program=sh x", "--compress-program"), ("sort --compress=sh x", "--compress"),
    ("sort -T /tmp x", "`-T`"), ("tail -f x", "`-f`"), ("ls -L", "`-L`"), ("head -n", "no value"),
    ("find . -exec id ;", "`-exec`"), ("find . -delete", "`-delete`"), ("find . -fprintf f x", "`-fprintf`"),
    ("find . -fls f", "`-fls`"), ("find . -ok id", "`-ok`"), ("find -L .", "`-L`"), ("find . -newer /etc/x", "-newer"),
    ("git -c core.pager=id log", "`git -c`"), ("git --exec-path=/x status", "`git --exec-path=/x`"),
    ("git -C /etc status", "`git -C`"), ("git --no-pager log", "`git --no-pager`"), ("git push", "`git push`"),
    ("git diff --ext-diff", "`--ext-diff`"), ("git diff --textconv", "`--textconv`"),
    ("git log --output=x", "--output"),
    ("git diff --no-index /etc/passwd x", "`--no-index`"), ("git log --pretty=%H", "--pretty"),
    ("git log --show-signature", "--show-signature"), ("git", "`git `"), ("pwd x", "with operands"),
    ("cat ../x", "outside the workspace"), ("cat /etc/passwd", "outside the workspace"),
    ("cat ./x/../../y", "outside the workspace"), ("ls ..", "outside the workspace"),
    ("./cat x", "`./cat` is not on it"), ("/bin/cat x", "`/bin/cat` is not on it"), ("'' x", "`` is not on it"),
    ("! cat x", "`!` is not on it"), ("time cat x", "`time` is not on it"), ("if true; then ls; fi", "`if`"),
    ("exec cat x", "`exec`"), ("command cat x", "`command`"), ("builtin echo x", "`builtin`"), ("eval ls", "`eval`"),
    ("source x", "`source`"), (". x", "`.` is not on it"), ("cat '|' x", None), ("grep '|' x", None),
])
def test_the_parser_refuses_what_it_cannot_prove_read_only(tmp_path: Path, command: str, why: str | None):
    found = not_read_only(command, tmp_path)
    if why is None:
        assert found is None, found
    else:
        assert found is not None and why in found, found


def test_a_quoted_operator_is_a_word_and_its_path_is_checked(tmp_path: Path):
    (tmp_path / "|").symlink_to("/etc/passwd")  # `cat '|' x` reads a file named | — here a link out
    assert split("cat '|' x") == [["cat", "|", "x"]]
    assert "`|` resolves outside" in not_read_only("cat '|' x", tmp_path)


def test_links_and_hard_links_out_of_the_workspace_are_refused(tmp_path: Path):
    ws, home = tmp_path / "ws", tmp_path / "home"
    ws.mkdir()
    home.mkdir()
    (home / "config.yaml").write_text("secret")
    (ws / "d").symlink_to(home)
    (ws / "f").symlink_to(home / "config.yaml")
    (ws / "sub").mkdir()
    os.link(home / "config.yaml", ws / "hard")
    for command in ("cat d/config.yaml", "cat f", "ls d", "grep -r x d", "find d", "cat sub/../d/config.yaml",
                    f"cat {ws}/d/config.yaml", "cat hard", "wc -l sub/../../home/config.yaml"):
        assert not_read_only(command, ws, [home]) is not None, command
    assert not_read_only("cat sub/../f", ws) is not None
    assert not_read_only(f"ls {ws} sub/.. ./sub", ws) is None


def test_the_workspace_holding_chatgates_home_is_never_read_only(tmp_path: Path):
    (tmp_path / "home").mkdir()
    assert "chatgate's own state" in not_read_only("ls", tmp_path, [tmp_path / "home"])


def test_a_program_of_the_same_name_in_the_workspace_is_refused(tmp_path: Path, monkeypatch):
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "cat").write_text("#!/bin/sh\ntouch pwned\n")
    (tmp_path / "bin" / "cat").chmod(0o755)
    monkeypatch.setenv("PATH", f"bin:{os.environ['PATH']}")  # a relative entry: found from the workspace
    assert "not the system's program" in not_read_only("cat notes.txt", tmp_path)
    assert not_read_only("echo hi", tmp_path) is None  # a bash builtin: PATH is not looked at


@pytest.mark.parametrize(("path", "text", "why"), [
    (".git/config", "[core]\n\tfsmonitor = touch pwned\n", "fsmonitor"),
    (".git/config", "[diff]\n\texternal = x\n", "external"),
    (".git/config", '[diff "x"]\n\ttextconv = x\n', "textconv"),
    (".git/config", '[filter "x"]\n\tclean = x\n', "filter"),
    (".git/config", "[CORE] PAGER = x\n", "pager"),
    (".git/config", "[core] hooksPath = /tmp\n", "hook"),
    (".git/config", "[include]\n\tpath = /tmp/x\n", "include"),
    (".git/config", "[core]\n\tworktree = /etc\n", "worktree"),
    (".git/hooks/post-index-change", "touch pwned\n", "hooks"),
    (".gitmodules", "[submodule]\n", "submodules"),
    ("global", "[core]\n\tfsmonitor = touch pwned\n", "fsmonitor"),
])
def test_git_asks_when_the_repository_can_run_a_program(tmp_path: Path, path: str, text: str, why: str,
                                                        monkeypatch):
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(tmp_path / "global"))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "notes.txt").write_text("x\n")
    git_repo(ws)
    assert not_read_only("git status", ws) is None
    with open(tmp_path / path if path == "global" else ws / path, "a") as f:
        f.write(text)
    for command in ("git status", "git diff", "git log -p"):
        found = not_read_only(command, ws)
        assert found is not None and why in found, found


def test_git_asks_when_git_is_not_a_folder_in_the_workspace(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", "/dev/null")
    ws = tmp_path / "ws"
    ws.mkdir()
    assert not_read_only("git status", ws) is not None  # no .git: git would look in the folders above
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("x\n")
    git_repo(other)
    (ws / ".git").write_text(f"gitdir: {other / '.git'}\n")
    assert "not a folder" in not_read_only("git status", ws)
    (ws / ".git").unlink()
    (ws / ".git").symlink_to(other / ".git")
    assert "not a folder" in not_read_only("git status", ws)
    monkeypatch.setenv("GIT_EXTERNAL_DIFF", "touch pwned")
    assert "environment" in not_read_only("git diff", other)


@pytest.mark.parametrize(("name", "value"), [("BASH_ENV", "/tmp/x.sh"), ("BASH_FUNC_cat%%", "() { id; }")])
def test_an_environment_that_makes_bash_run_code_first_is_refused(tmp_path: Path, monkeypatch, name: str,
                                                                 value: str):
    assert not_read_only("cat notes.txt", tmp_path) is None
    monkeypatch.setenv(name, value)
    assert "bash's environment" in not_read_only("cat notes.txt", tmp_path)
