"""The commands that run the rest of their line (sudo, env, nohup, timeout, nice, …), and the project
runners that do so after a verb (`uv run`, `npm exec`): the classifier peels them off to judge what
they run (`verdict._Analysis.peel`)."""

from __future__ import annotations

from agent.safety.classifier.rules.execution import EXTRA_WRAPPERS

# wrappers that run the rest of the line: (short options taking a value, long ones, positionals to skip)
WRAPPERS = {
    "sudo": ("ugpChDrtUT", ("user", "group", "prompt", "close-from", "chdir", "role", "type", "other-user", "host",
                            "command-timeout"), 0),
    "doas": ("uC", (), 0), "pkexec": ("", ("user",), 0), "nohup": ("", (), 0), "setsid": ("", (), 0),
    "unbuffer": ("", (), 0), "builtin": ("", (), 0), "exec": ("a", (), 0), "time": ("fo", ("format", "output"), 0),
    "nice": ("n", ("adjustment",), 0), "ionice": ("cnp", ("class", "classdata", "pid"), 0),
    "stdbuf": ("ioe", ("input", "output", "error"), 0), "timeout": ("sk", ("signal", "kill-after"), 1),
    "chroot": ("", ("userspec", "groups"), 1), "taskset": ("", (), 1), "chrt": ("", (), 1),
    "strace": ("oepsuEPIab", (), 0), "ltrace": ("oepsuEnaA", (), 0), "torsocks": ("upaP", (), 0),
    "proxychains": ("f", (), 0), "proxychains4": ("f", (), 0), "caffeinate": ("tw", (), 0),
    "faketime": ("f", (), 1), "numactl": ("CmNPip", (), 0), "busybox": ("", (), 0), "toybox": ("", (), 0),
    "command": ("", (), 0), "env": ("uCS", ("unset", "chdir", "split-string"), 0), "su": ("cgsG", (
        "command", "group", "shell"), 0), "runuser": ("cugGs", ("command", "user", "group", "shell"), 0),
    "flock": ("cwE", ("command", "timeout", "conflict-exit-code"), 1), "watch": ("ndgq", ("interval",), 0),
    "systemd-run": ("upEMHs", ("unit", "property", "setenv", "machine", "host", "slice", "uid", "gid"), 0),
    "nix-shell": ("pAI", ("run", "command", "packages", "attr"), 0), "sg": ("c", (), 1), **EXTRA_WRAPPERS,
}
# project runners that run the rest of the line after their verb (`uv run pytest`)
RUNNERS = {"poetry": "run", "pipenv": "run", "pdm": "run", "uv": "run", "hatch": "run", "rye": "run",
            "bundle": "exec", "conda": "run", "mamba": "run", "micromamba": "run", "npm": "exec", "pnpm": "exec"}
