"""Programs that run a command they are handed — on many hosts, in a cloud VM, in a terminal multiplexer, under an
environment or secret injector — for the classifier. The principle: the command handed over keeps its full
weight wherever it runs, so each rule here finds that command and hands it back to the guard.

* Fleets (pdsh, pssh, clush, mussh, dsh, knife ssh, fab, ansible `-m command|shell|raw -a`, salt/salt-ssh
  `cmd.run`): a command sent to many machines keeps its full weight, as a command sent over `ssh` does (`ssh host
  'sudo reboot'` is hardline, so is `pdsh -w node[1-9] reboot`). Running any command across hosts stays dangerous
  by itself (`pdsh -w n[1-9] uptime`); inventory and facts (`ansible all -m ping`, `salt '*' test.ping`) do not.
  Fleet modules that power hosts off (`ansible -m reboot`, `salt '*' system.reboot`) are hardline. Salt minions
  and `ansible -b` run as root; `salt-call` runs on this machine.
* Remote execution through a cloud CLI (`gcloud compute ssh VM --command`, `az vm run-command invoke --scripts`,
  `aws ssm send-command ... commands=`, `doctl compute ssh --ssh-command`, `flyctl ssh console -C`, `tsh ssh`,
  `mosh host --`, `autossh`): the same as ssh. A throwaway container or VM (`heroku run`, `vagrant ssh -c`,
  `lxc|incus exec`, `multipass exec`, `limactl shell`, `colima ssh`, `docker compose run`) is like `docker exec`:
  never worse than dangerous. `distrobox enter`, `toolbox run`, `flatpak-spawn --host` and `ip netns exec` share this
  machine's files and processes: full weight.
* Terminal multiplexers (tmux, byobu, screen, zellij): the command a session, window, pane, popup or `run-shell`
  starts, and text typed into a session with Enter (`tmux send-keys 'rm -rf ~' Enter`, `screen -X stuff
  $'...\\n'`), run as this user: full weight. Killing a server, a session, a window or a pane (`tmux kill-server`,
  `screen -X quit`, `zellij kill-all-sessions`) kills every program running in it: dangerous.
* Runners that set up an environment and run the rest of their line (`aws-vault exec P --`, `doppler run --`, `op
  run --`, `direnv exec DIR`, `nix develop -c`, `mise exec --`, `pyenv exec`, `perf stat`, `hyperfine`, `entr`,
  `watchexec`, `nodemon --exec`, `npm exec -c`): transparent — the command is judged as if typed.
"""

from __future__ import annotations

import re
from typing import Iterator

from agent.safety.classifier.lazy import lazy_re
from agent.safety.classifier.vocabulary import DANGEROUS, HARDLINE, Call, Finding, Hit, Recurse, by_name, parse

# ---------------------------------------------------------------- fleets

_SALT_RUN = frozenset({"cmd.run", "cmd.run_all", "cmd.run_stdout", "cmd.run_stderr", "cmd.shell", "cmd.run_bg"})
_SALT_POWER = frozenset({"system.reboot", "system.poweroff", "system.shutdown", "system.halt", "system.power_off"})
_SALT_OTHER = frozenset({"cmd.script", "cmd.exec_code", "cmd.exec_code_all", "cmd.powershell", "state.apply",
                         "state.highstate", "state.sls", "file.remove", "cmd.retcode", "cp.get_file"})
_ANSIBLE_RUN = frozenset({"command", "shell", "raw"})
_ANSIBLE_POWER = frozenset({"reboot", "shutdown"})
_FLEET_OPTS = {  # tool -> short options taking a value, long ones (the command is what follows the options)
    "pdsh": ("wxgXlRftuMd", ()), "pssh": ("hHlpoetOxX", ("hosts", "host", "user", "par", "outdir", "errdir",
                                                          "timeout", "option", "extra-args", "extra-arg")),
    "clush": ("wxgXlfturoOER", ("nodes", "group", "user", "fanout", "options", "worker")),
    "dsh": ("mgroFf", ("machine", "group", "remoteshell", "remoteshellopt", "forklimit", "file")),
}
_FLEET_OPTS["parallel-ssh"] = _FLEET_OPTS["pssh"]


def _fleet(c: Call) -> tuple[str | None, str, bool]:
    """(the command sent to the hosts, or None; the rule's name for it; whether it runs there as root)."""
    n, a = c.name, c.args
    if n in _FLEET_OPTS:
        o = parse(a, *_FLEET_OPTS[n], stop=True)
        user = o.val("l", "user") or ""
        return (" ".join(o.rest) or None), n, user == "root"
    if n == "mussh":
        cmds = [a[k + 1] for k, x in enumerate(a[:-1]) if x == "-c"]
        return ("\n".join(cmds) or None), n, any(x == "root" for k, x in enumerate(a[1:]) if a[k] == "-l")
    if n == "knife" and a[:1] == ["ssh"]:
        o = parse(a[1:], "xaiCpPmGe", ("ssh-user", "attribute", "identity-file", "concurrency", "ssh-port",
                                       "ssh-password", "ssh-gateway"))
        return (o.pos[1] if len(o.pos) > 1 else None), "knife ssh", o.val("x", "ssh-user") == "root"
    if n in ("fab", "fab2") and "--" in a:
        return " ".join(a[a.index("--") + 1:]) or None, "fab", False
    if n == "ansible":
        o = parse(a, "amiufMeTcltBP", ("module-name", "args", "inventory", "user", "extra-vars", "forks",
                                       "become-user", "become-method", "timeout", "limit", "private-key"))
        module = (o.val("m", "module-name") or "command").rsplit(".", 1)[-1]
        root = o.has("b", "become") and (o.val("become-user") or "root") == "root"
        if module in _ANSIBLE_RUN and o.val("a", "args"):
            return o.val("a", "args"), f"ansible -m {module}", root
        return None, f"ansible -m {module}", root
    if n in ("salt", "salt-ssh", "salt-call"):
        o = parse(a, "tbca", ("timeout", "batch-size", "batch", "config-dir", "out", "return", "user", "priv",
                               "roster-file"))
        pos = o.pos if n == "salt-call" else o.pos[1:]
        func, args = (pos[0], pos[1:]) if pos else ("", [])
        cmd = next((x for x in args if "=" not in x.split(" ", 1)[0]), None) if func in _SALT_RUN else None
        return cmd, f"{n} {func}", n != "salt-ssh" or "--priv" in " ".join(a)
    return None, n, False


_ANSIBLE_READ = frozenset("ping setup gather_facts debug stat package_facts service_facts win_ping assert "
                          "set_fact include_vars wait_for".split())
_SALT_READ = lazy_re(r"^(test|grains|status|sys|disk|network)\.|\.(list_\w*|get_all|status|version|latest_version"
                     r"|file_exists|stats|ping|get|info)$")


def r_fleet(c: Call) -> Iterator[Finding]:
    """Commands across hosts: dangerous by themselves, and the command keeps its weight (see the module's text)."""
    cmd, label, root = _fleet(c)
    func = label.rsplit(" ", 1)[-1]
    if c.name == "ansible" and func in _ANSIBLE_POWER or c.name.startswith("salt") and func in _SALT_POWER:
        yield Hit(HARDLINE, "power off / reboot across hosts" if c.name != "salt-call" else "power off / reboot",
                  c.shown)
    elif c.name == "ansible" and func not in _ANSIBLE_READ or c.name in ("salt", "salt-ssh") and func and not \
            _SALT_READ.search(func) or c.name in ("pdsh", "pssh", "parallel-ssh", "clush", "mussh", "dsh", "pdcp") \
            or cmd is not None and c.name != "salt-call" or c.name == "mco" and {"rpc", "shell"} & set(c.args):
        yield Hit(DANGEROUS, f"runs commands across hosts ({label})", c.shown)
    elif c.name == "salt-call" and func and not _SALT_READ.search(func) and cmd is None:
        yield Hit(DANGEROUS, f"changes this machine through salt ({label})", c.shown)
    if cmd:
        where = "this machine" if c.name == "salt-call" else "many hosts"
        yield Recurse("shell", cmd, f"{label} on {where}" + (" as root" if root else ""))


# ---------------------------------------------------------------- remote execution through cloud CLIs and VMs

def _values(a: list[str], *names: str) -> list[str]:
    """The values of options `names` (`--x V`, `--x=V`, `-x V`); after --scripts, every word up to the next option."""
    out = []
    for k, x in enumerate(a):
        opt, eq, v = x.partition("=")
        if opt in names and eq:
            out.append(v)
        elif x == "--scripts":
            out.extend(w for w in a[k + 1:k + 1 + next((j for j, w in enumerate(a[k + 1:]) if w.startswith("--")),
                                                        len(a))])
        elif x in names and k + 1 < len(a):
            out.append(a[k + 1])
    return out


_SSM = lazy_re(r"""commands\W*\[?\s*((?:"(?:[^"\\]|\\.)*"\s*,?\s*)+)|commands=([^\]\[,]+)""")


def r_remote_exec(c: Call) -> Iterator[Finding]:
    n, a = c.name, c.args
    words = [x for x in a if not x.startswith("-")]
    after = a[a.index("--") + 1:] if "--" in a else []
    cmds, cap, via = [], HARDLINE, n
    if n == "gcloud" and "ssh" in words[:4]:
        cmds = _values(a, "--command") + ([" ".join(after)] if after else [])
        via = "gcloud compute ssh"
    elif n == "az" and words[:3] == ["vm", "run-command", "invoke"] or n == "az" and words[:2] == ["vm", "run-command"]:
        cmds, via = ["\n".join(_values(a, "--scripts", "--script"))], "az vm run-command"
    elif n == "aws" and words[:2] == ["ssm", "send-command"]:
        for v in _values(a, "--parameters"):
            for m in _SSM.finditer(v):
                cmds += re.findall(r'"((?:[^"\\]|\\.)*)"', m.group(1)) if m.group(1) else [m.group(2)]
        via = "aws ssm send-command"
    elif n == "doctl" and "ssh" in words[:3]:
        cmds, via = _values(a, "--ssh-command"), "doctl compute ssh"
    elif n in ("flyctl", "fly") and words[:2] == ["ssh", "console"]:
        cmds, via = _values(a, "-C", "--command"), f"{n} ssh console"
    elif n == "tsh" and words[:1] == ["ssh"]:
        o = parse(a[a.index("ssh") + 1:], "lpLi", ("login", "port", "cluster", "proxy", "user"), stop=True)
        cmds, via = [" ".join(o.rest[1:])] if len(o.rest) > 1 else [], f"tsh ssh {o.rest[0] if o.rest else ''}"
    elif n == "mosh" and after:
        cmds, via = [" ".join(after)], "mosh"
    elif n == "heroku" and words[:1] and words[0] in ("run", "run:detached", "run:inside"):
        o = parse(a[a.index(words[0]) + 1:], "asre", ("app", "size", "remote", "env", "type", "exit-code"))
        cmds, cap, via = [" ".join(after or o.pos)], DANGEROUS, "heroku run (a one-off dyno)"
    elif n == "vagrant" and words[:1] == ["ssh"]:
        cmds, cap, via = _values(a, "-c", "--command") + ([" ".join(after)] if after else []), DANGEROUS, "vagrant ssh"
    elif n in ("lxc", "incus", "multipass") and words[:1] == ["exec"] and after:
        cmds, cap, via = [" ".join(after)], DANGEROUS, f"{n} exec"
    elif n == "limactl" and words[:1] == ["shell"] or n == "colima" and words[:1] == ["ssh"] and after:
        rest = after or parse(a[a.index("shell") + 1:], "", ("workdir", "shell"), stop=True).rest[1:]
        cmds, cap, via = [" ".join(rest)], DANGEROUS, f"{n} {words[0]}"
    elif n in ("distrobox", "distrobox-enter", "toolbox") and (after or words[:1] == ["run"]):
        rest = after or parse(a[a.index("run") + 1:], "cr", ("container", "release", "distro"), stop=True).rest
        cmds, via = [" ".join(rest)], f"{n} (shares this machine's files)"
    if any(x.strip() for x in cmds):
        yield Recurse("shell", "\n".join(x for x in cmds if x.strip()), via, cap=cap)
    if n in ("autossh",):
        o = parse(a, "MBbcDEeFIiJLlmOopQRSWw", stop=True)
        if len(o.rest) > 1:
            yield Recurse("shell", " ".join(o.rest[1:]), f"autossh {o.rest[0]}")


# ---------------------------------------------------------------- terminal multiplexers

_TMUX_RUNS = {  # subcommand -> short options taking a value (the command follows them)
    "new-session": "cefFnstxy", "new": "cefFnstxy", "new-window": "cefFnt", "neww": "cefFnt",
    "split-window": "celFt", "splitw": "celFt", "respawn-pane": "cet", "respawnp": "cet", "respawn-window": "cet",
    "respawnw": "cet", "run-shell": "dt", "run": "dt", "display-popup": "cdehsStTwxy", "popup": "cdehsStTwxy",
    "pipe-pane": "t", "pipep": "t", "if-shell": "t", "if": "t",
}
_TMUX_KILL = frozenset("kill-server kill-session kill-window killw kill-pane killp".split())
_ENTER = frozenset({"Enter", "C-m", "KPEnter", "C-j", "^M", "\n", "\r"})


def _tmux_commands(args: list[str]) -> list[list[str]]:
    """tmux [global options] CMD ... [; CMD ...]: each command's words."""
    o = parse(args, "cfLST", ("config",), stop=True)
    out, cur = [["-c-global", o.val("c")]] if o.val("c") else [], []
    for w in o.rest:
        if w in (";", "\\;") or w.endswith(";") and not w.endswith("\\;") and w != ";":
            if w not in (";", "\\;"):
                cur.append(w[:-1])
            out.append(cur)
            cur = []
        else:
            cur.append(w)
    return out + [cur] if cur else out


def r_multiplexer(c: Call) -> Iterator[Finding]:
    if c.name in ("tmux", "byobu"):
        for cmd in _tmux_commands(c.args):
            sub, rest = (cmd[0], cmd[1:]) if cmd else ("", [])
            if sub == "-c-global":
                yield Recurse("shell", rest[0], "tmux -c")
            elif sub in _TMUX_KILL:
                yield Hit(DANGEROUS, f"kills the programs running in a terminal multiplexer ({c.name} {sub})", c.shown)
            elif sub in _TMUX_RUNS:
                o = parse(rest, _TMUX_RUNS[sub], stop=True)
                if o.rest:
                    yield Recurse("shell", " ".join(o.rest[:1] if sub in ("if-shell", "if") else o.rest),
                                  f"{c.name} {sub}")
            elif sub in ("send-keys", "send"):
                o = parse(rest, "Nt", stop=True)
                text = [k for k in o.rest if k not in _ENTER]
                if text and (set(o.rest) & _ENTER or any("\n" in k or "\r" in k for k in o.rest)):
                    yield Recurse("shell", " ".join(text), f"{c.name} send-keys (typed into a session)")
    elif c.name == "screen":
        yield from _screen(c)
    elif c.name == "zellij":
        words = [x for x in c.args if not x.startswith("-")]
        if words[:1] and re.fullmatch(r"kill-(all-)?sessions?|k|ka|delete-(all-)?sessions?|d|da", words[0]):
            yield Hit(DANGEROUS, f"kills the programs running in a terminal multiplexer (zellij {words[0]})", c.shown)
        elif words[:1] in (["run"], ["r"]) and "--" in c.args:
            yield Recurse("argv", tuple(c.args[c.args.index("--") + 1:]), "zellij run")


def _screen(c: Call) -> Iterator[Finding]:
    """screen [options] [CMD ...]: a new session runs CMD; with -X, CMD is sent to a running session."""
    a, k, flags = c.args, 0, set()
    while k < len(a) and a[k].startswith("-"):
        x = a[k]
        if x in ("-ls", "-list", "-wipe", "-v", "-version", "--version", "-h", "--help"):
            return
        flags |= set(x[1:])
        k += 2 if x == "-Logfile" or x[-1] in "SceEhpTst" and x != "-Logfile" else 1
    cmd = a[k:]
    if "X" in flags:
        if cmd[:1] and cmd[0] in ("quit", "kill", "kill-all"):
            yield Hit(DANGEROUS, f"kills the programs running in a terminal multiplexer (screen -X {cmd[0]})", c.shown)
        elif cmd[:1] == ["stuff"] and len(cmd) > 1 and re.search(r"\n|\r|\^M|\\n|\\r", cmd[1]):
            yield Recurse("shell", re.sub(r"\^M|\\n|\\r|\r", "\n", cmd[1]), "screen stuff (typed into a session)")
        elif cmd[:1] in (["exec"], ["screen"]) and len(cmd) > 1:
            yield Recurse("argv", tuple(w for w in cmd[1:] if not w.startswith(("-", "!", ".", "|"))), "screen")
    elif cmd and not (flags & set("rRxD") or "d" in flags and "m" not in flags):
        yield Recurse("argv", tuple(cmd), "screen")


# ---------------------------------------------------------------- runners of the rest of the line

# program -> (subcommands after which the command comes; positionals to skip after the subcommand; options that hold
# a shell string; "--" required)
_ENV_RUNNERS = {
    "aws-vault": (("exec",), 1, (), False), "doppler": (("run",), 0, ("--command",), False),
    "infisical": (("run",), 0, ("--command",), False), "op": (("run",), 0, (), True),
    "chamber": (("exec",), 0, (), True), "teller": (("run",), 0, (), True), "dotenv": (("",), 0, (), True),
    "dotenvx": (("run",), 0, (), True), "envchain": (("",), 1, (), False), "sops": (("exec-env",), 1, (), False),
    "direnv": (("exec",), 1, (), False), "mise": (("exec", "x"), 0, (), True), "rtx": (("exec", "x"), 0, (), True),
    "asdf": (("exec",), 0, (), False), "pyenv": (("exec",), 0, (), False), "rbenv": (("exec",), 0, (), False),
    "nodenv": (("exec",), 0, (), False), "goenv": (("exec",), 0, (), False), "jenv": (("exec",), 0, (), False),
    "nvm": (("exec",), 1, (), False), "fnm": (("exec",), 0, (), False), "volta": (("run",), 0, (), False),
    "devbox": (("run",), 0, (), False), "nix": (("develop", "shell"), 0, ("-c", "--command"), False),
    "perf": (("stat", "record", "trace"), 0, (), False), "npm": (("exec", "x"), 0, ("-c", "--call"), False),
    "npx": (("",), 0, ("-c", "--call"), False), "cargo": (("watch",), 0, ("-s", "--shell"), False),
    "flatpak-spawn": (("",), 0, (), False), "ip": (("netns", "vrf"), 0, (), False),
    "cabal": (("exec",), 0, (), False), "stack": (("exec",), 0, (), False), "opam": (("exec",), 0, (), False),
    "pixi": (("run", "exec"), 0, (), False), "yarn": (("exec",), 0, (), False),
}
_PERF_VALUES = ("eopFcrxCIGtuUdm", ("event", "output", "pid", "tid", "repeat", "cpu", "call-graph", "freq", "count",
                                    "cgroup", "uid", "delay", "mmap-pages", "field-separator", "interval-print"))


def r_env_runner(c: Call) -> Iterator[Finding]:
    subs, skip, shell_opts, dashdash = _ENV_RUNNERS[c.name]
    a = c.args
    for v in _values(a, *shell_opts):
        if c.name not in ("nix",):
            yield Recurse("shell", v, f"{c.name} {shell_opts[0]}")
    if c.name == "nix" and shell_opts and any(x in shell_opts for x in a):
        k = next(k for k, x in enumerate(a) if x in shell_opts)
        yield Recurse("argv", tuple(a[k + 1:]), f"nix {a[0] if a else ''}")
        return
    words = [x for x in a if not x.startswith("-")]
    if subs != ("",) and (not words or words[0] not in subs):
        return
    if c.name == "ip":  # ip netns exec NAME cmd..., ip vrf exec NAME cmd...
        at = a.index(words[0])
        rest = a[at + 1:]
        if rest[:1] == ["exec"] and len(rest) > 2:
            yield Recurse("argv", tuple(rest[2:]), f"ip {words[0]} exec")
        return
    if "--" in a:
        yield Recurse("argv", tuple(a[a.index("--") + 1:]), f"{c.name} {words[0] if subs != ('',) else ''}".strip())
        return
    if dashdash or shell_opts and any(x in shell_opts or x.split("=")[0] in shell_opts for x in a):
        return
    at = a.index(words[0]) + 1 if subs != ("",) else 0
    short, long = _PERF_VALUES if c.name == "perf" else ("", ())
    rest = parse(a[at:], short, long, stop=True).rest[skip:]
    if c.name in ("flatpak-spawn",) or rest:
        if rest and c.name == "sops":
            yield Recurse("shell", " ".join(rest), "sops exec-env")
        elif rest:
            yield Recurse("argv", tuple(rest), f"{c.name} {words[0] if subs != ('',) else ''}".strip())


_HYPERFINE = ("wmMrsupcPDLSnN", ("warmup", "min-runs", "max-runs", "runs", "setup", "prepare", "cleanup", "conclude",
                                 "parameter-scan", "parameter-step-size", "parameter-list", "shell", "time-unit",
                                 "command-name", "output", "input", "export-json", "export-csv", "export-markdown",
                                 "export-asciidoc", "export-orgmode", "style", "sort", "reference"))


def r_dev_runner(c: Call) -> Iterator[Finding]:
    """hyperfine, entr, watchexec, nodemon: a command run again and again; judged as typed."""
    a = c.args
    if c.name == "hyperfine":
        o = parse([x for x in a if x not in ("-i", "-N")], *_HYPERFINE)
        for cmd in o.pos + [v for k in ("s", "p", "c") for v in o.vals.get(k, [])] + [
                v for k in ("setup", "prepare", "cleanup", "conclude") for v in o.longs.get(k, [])]:
            yield Recurse("shell", cmd, "hyperfine")
    elif c.name == "entr":
        o = parse(a, "", stop=True)
        if o.rest:
            yield Recurse("shell" if o.has("s") else "argv", o.rest[0] if o.has("s") else tuple(o.rest), "entr")
    elif c.name == "watchexec":
        values = ("exts", "watch", "ignore", "delay", "signal", "shell", "env")
        rest = a[a.index("--") + 1:] if "--" in a else parse(a, "ewidsEWpI", values, stop=True).rest
        if rest:
            yield Recurse("shell", " ".join(rest), "watchexec")
    elif c.name == "nodemon":
        for v in _values(a, "-x", "--exec"):
            yield Recurse("shell", v, "nodemon --exec")


RULES = by_name(
    (("ansible", "salt", "salt-ssh", "salt-call", "pdsh", "pssh", "parallel-ssh", "clush", "mussh", "dsh", "pdcp",
      "knife", "mco", "fab", "fab2"), r_fleet),
    (("gcloud", "az", "aws", "doctl", "flyctl", "fly", "tsh", "mosh", "heroku", "vagrant", "lxc", "incus",
      "multipass", "limactl", "colima", "distrobox", "distrobox-enter", "toolbox", "autossh"),
     r_remote_exec),
    (("tmux", "byobu", "screen", "zellij"), r_multiplexer), (tuple(_ENV_RUNNERS), r_env_runner),
    (("hyperfine", "entr", "watchexec", "nodemon"), r_dev_runner))
