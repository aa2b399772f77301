"""The command line loads only what the chosen command uses (issue 34): `--help`, `--version`, a bare
`chatgate`, `approvals check` and `completion` load no event loop, configuration, database, HTTP
or LLM client; `status`, `cron list` and `board list` load the configuration and the database but never the
HTTP client, the LLM client or a platform's SDK, even with every platform configured; the operators'
`logs`, `service start|stop|restart` and `restore` read no configuration either. Each command
runs as a user runs it (the console script's entry point, in a process of its own); what is pinned
is the set of modules loaded when it ends, not a time. Also: every command names a handler that
exists, and the shell completion scripts complete in bash and zsh.
"""

from __future__ import annotations

import inspect
import json
import os
import shutil
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest

SDKS = {"aiohttp", "openai", "telegram", "discord", "slack_bolt", "slack_sdk"}
# what none of the light commands may load: the above, the event loop, the configuration and the database
LIGHT = SDKS | {"asyncio", "aiosqlite", "pydantic", "pydantic_settings", "yaml", "gateway.config", "gateway.storage"}

RUN_AND_LIST_MODULES = """
import json, sys
from gateway.cli.launch import main  # the `chatgate` console script's entry point
try:
    status = main(sys.argv[2:])
except SystemExit as exc:  # --help and --version end in argparse's exit
    status = exc.code
with open(sys.argv[1], "w") as out:
    json.dump({"status": status or 0, "modules": sorted(sys.modules)}, out)
"""

CONFIG = """\
llm: {base_url: "http://127.0.0.1:9/v1", api_key: sk-test}
platforms:
  telegram: {token: "123:abc"}
  discord: {token: discord-token}
  slack: {bot_token: xoxb-1, app_token: xapp-1}
"""


def clean_env(home: Path) -> dict[str, str]:
    """This process's environment without settings that would change what the command reads."""
    kept = {k: v for k, v in os.environ.items()
            if not k.startswith(("CHATGATE_", "OPENAI_", "TELEGRAM_", "DISCORD_", "SLACK_"))}
    return {**kept, "CHATGATE_HOME": str(home)}


def chatgate(home: Path, *args: str, env: dict[str, str] | None = None) -> tuple[subprocess.CompletedProcess[str],
                                                                                dict[str, Any]]:
    """`chatgate ARGS` in a process of its own: its output, exit status and the modules it had loaded."""
    report = home.parent / f"modules-{os.getpid()}.json"
    report.unlink(missing_ok=True)
    done = subprocess.run([sys.executable, "-c", RUN_AND_LIST_MODULES, str(report), *args], capture_output=True,
                          text=True, env={**clean_env(home), **(env or {})}, timeout=60,
                          stdin=subprocess.DEVNULL)  # (no terminal)
    assert report.exists(), done.stderr
    return done, json.loads(report.read_text())


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A home made by chatgate, every platform configured, one scheduled job."""
    home = tmp_path_factory.mktemp("cli") / "home"
    home.mkdir(mode=0o700)
    (home / "config.yaml").write_text(CONFIG)
    done, _ = chatgate(home, "cron", "add", "standup", "every 30m", "say hello", "--to", "none")
    assert done.returncode == 0 and "standup" in done.stdout, done.stderr
    return home


@pytest.mark.parametrize(("args", "status", "prints", "forbidden"), [
    pytest.param(["--version"], 0, f"chatgate {version('chatgate')}\n", LIGHT, id="--version"),
    pytest.param(["--help"], 0, "usage: chatgate", LIGHT, id="--help"),
    pytest.param([], 0, "usage: chatgate", LIGHT, id="bare"),  # a bare `chatgate`: the help, not an error
    pytest.param(["approvals", "check", "ls -la"], 0, '{"verdict": "safe", "reasons": []}', LIGHT, id="check"),
    pytest.param(["completion", "bash"], 0, "complete -o bashdefault -F _shtab_chatgate chatgate", LIGHT,
                 id="completion"),
    pytest.param(["setup", "--help"], 0, "usage: chatgate setup", LIGHT, id="setup --help"),
    pytest.param(["status"], 3, "chatgate is not running", SDKS, id="status"),
    pytest.param(["cron", "list"], 0, "standup", SDKS, id="cron list"),
    pytest.param(["board", "list"], 0, "no tasks", SDKS, id="board list"),
    pytest.param(["config", "show"], 0, "llm:\n", SDKS, id="config show"),
])
def test_a_command_loads_only_what_it_uses(home: Path, args: list[str], status: int, prints: str,
                                           forbidden: set[str]):
    done, report = chatgate(home, *args)
    assert report["status"] == status, done.stderr
    assert prints in done.stdout, done.stdout + done.stderr
    loaded = sorted(forbidden & set(report["modules"]))  # (a submodule loads its package)
    assert not loaded, f"chatgate {' '.join(args)} loaded {loaded}"


def test_the_operators_commands_load_only_what_they_use(home: Path, tmp_path: Path):
    """`logs` (here: the home's log file, by priority — without -p it becomes `tail`), `service
    restart` and `restore` read no configuration; `service status` reads it, and loads no SDK."""
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "systemctl").write_text("#!/bin/sh\necho '● chatgate.service'\n")
    (tmp_path / "bin" / "systemctl").chmod(0o755)
    (tmp_path / "units").mkdir()
    (tmp_path / "units" / "chatgate.service").write_text("[Service]\n")
    (home / "logs").mkdir(exist_ok=True)
    (home / "logs" / "chatgate.log").write_text("2026-11-29 01:00:00,001 WARNING chatgate: look\n")
    done, _ = chatgate(home, "backup", str(tmp_path / "backup.tar.gz"))
    assert done.returncode == 0, done.stderr
    env = {"PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}", "XDG_CONFIG_HOME": str(tmp_path / "xdg")}
    for args, status, prints, forbidden, where in [
            (["logs", "-p", "warning"], 0, "WARNING chatgate: look", LIGHT, home),
            (["service", "restart", "--unit-dir", str(tmp_path / "units")], 0, "chatgate restarted", LIGHT, home),
            (["service", "status", "--unit-dir", str(tmp_path / "units")], 3, "chatgate is not running", SDKS, home),
            (["restore", str(tmp_path / "backup.tar.gz")], 0, "restored", LIGHT, tmp_path / "restored")]:
        done, report = chatgate(home, *args, env={**env, "CHATGATE_HOME": str(where)})
        assert report["status"] == status and prints in done.stdout, done.stdout + done.stderr
        loaded = sorted(forbidden & set(report["modules"]))
        assert not loaded, f"chatgate {' '.join(args)} loaded {loaded}"


def test_setup_loads_no_client_before_it_tests_an_answer(home: Path):
    """Missing answers (no terminal to ask on) are found before any test: no LLM client, no SDK."""
    before = (home / "config.yaml").read_text()
    done, report = chatgate(home, "setup", "--force")
    assert report["status"] == 2
    assert done.stderr == ("chatgate setup: no terminal to ask on, and no answer for: --model, --admin (give them as "
                           "options; chatgate setup --help)\n")
    assert not sorted(SDKS & set(report["modules"]))
    assert (home / "config.yaml").read_text() == before


def test_every_command_names_a_handler_that_exists():
    """A handler is named by a string (imported only when chosen): a typo would show only when a
    user runs that command. Each command that takes no subcommand has one (its own or its group's),
    of the kind its parser declares: async with the configuration, plain without."""
    from gateway.cli.dispatch import load
    from gateway.cli.parsers import build, commands

    found = dict(commands(build()))
    chosen: dict[tuple[str, ...], tuple[str, bool]] = {}
    for words, parser in found.items():  # (a group comes before its commands)
        own = parser.get_default("handler")
        chosen[words] = (own, parser.get_default("needs_config")) if own else chosen.get(words[:-1])  # type: ignore
    leaves = [words for words in found if not any(other[:-1] == words for other in found)]
    assert len(leaves) >= 39  # (as many as there were when this was written, or more)
    for words in leaves:
        assert chosen[words], f"chatgate {' '.join(words)} names no handler"
        target, needs_config = chosen[words]
        assert inspect.iscoroutinefunction(load(target)) == needs_config, target
    assert chosen[("approvals", "check")] == ("gateway.cli.check:check", False)
    assert chosen[("approvals", "rules")] == ("gateway.cli.state:rules", True)


def test_bash_completion_completes_commands_choices_and_paths(home: Path, tmp_path: Path):
    done, _ = chatgate(home, "completion", "bash")
    script = tmp_path / "chatgate.bash"
    script.write_text(done.stdout)
    (tmp_path / "backup-monday.tar.gz").write_text("")
    complete = ('source "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); COMP_LINE="$*"; '
                'COMP_POINT=${#COMP_LINE}; _shtab_chatgate; printf "%s\\n" "${COMPREPLY[@]}"')

    def offers(*words: str) -> list[str]:
        out = subprocess.run(["bash", "-c", complete, "bash", str(script), "chatgate", *words], cwd=tmp_path,
                             capture_output=True, text=True, timeout=30)
        assert out.returncode == 0, out.stderr
        return out.stdout.split()

    assert offers("appr") == ["approvals"]
    assert offers("approvals", "") == ["check", "rules"]
    assert offers("completion", "") == ["bash", "zsh"]
    assert offers("board", "") == ["add", "list", "show", "answer", "comment", "cancel"]
    assert offers("board", "list", "--status", "") == ["todo", "ready", "running", "blocked", "done", "archived"]
    assert offers("--vers") == ["--version"]
    assert offers("backup", "backup-") == ["backup-monday.tar.gz"]  # a path: the shell offers file names
    assert offers("--config", "backup-") == ["backup-monday.tar.gz"]


ZSH_DRIVER = r"""
zmodload zsh/zpty
out=$1 folder=$2; shift 2
zpty z 'PS1="> " zsh -f -i'
zpty -w z "fpath=($folder \$fpath); autoload -U compinit; compinit -u -D"
zpty -w z "dump() { print -r -- \"\$BUFFER\" >> $out; BUFFER=''; }; zle -N dump; bindkey '^X' dump"
n=0
for line in "$@"; do  # type it, TAB, then ^X writes what the line became
  (( n++ ))
  zpty -w -n z "$line"$'\t\x18'
  for i in {1..100}; do [[ -f $out && $(wc -l < $out) -ge $n ]] && break; sleep 0.1; done
done
zpty -d z
"""


def test_zsh_completion_completes_commands_choices_and_paths(home: Path, tmp_path: Path):
    """An interactive zsh (on a pseudo-terminal) with the script on its fpath, as the README installs it."""
    assert shutil.which("zsh"), "zsh is missing: apt-get install zsh (.ci/run does)"
    done, _ = chatgate(home, "completion", "zsh")
    functions = tmp_path / "functions"
    functions.mkdir()
    (functions / "_chatgate").write_text(done.stdout)
    (tmp_path / "backup-monday.tar.gz").write_text("")
    lines = ["chatgate appr", "chatgate approvals ch", "chatgate completion z", "chatgate backup backup-",
             "chatgate --config backup-"]
    driver = subprocess.run(["zsh", "-f", "-c", ZSH_DRIVER, "zsh", str(tmp_path / "out"), str(functions), *lines],
                            cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert driver.returncode == 0, driver.stderr
    assert (tmp_path / "out").read_text().splitlines() == [
        "chatgate approvals ", "chatgate approvals check ", "chatgate completion zsh ",
        "chatgate backup backup-monday.tar.gz ", "chatgate --config backup-monday.tar.gz "]
