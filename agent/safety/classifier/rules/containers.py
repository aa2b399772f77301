"""Containers, clusters and infrastructure tools: docker/podman, kubectl/helm, terraform and cloud CLIs.

A command run inside a container is weighed by what it can reach. `docker exec` and `kubectl exec` run
in a container that mounts nothing new: never worse than dangerous. `docker run`/`create` with host
paths mounted (`-v SRC:DST`, `--mount source=..,target=..`, `--device`, and `--privileged`, which shows
the host's /dev) is judged with each container path under a mount read as the host path it is: `docker
run -v /:/host alpine rm -rf /host` wipes the host's / and is hardline, `--privileged -v /dev:/dev ... dd
of=/dev/sda` overwrites the host's disk. A command that touches none of the mounts stays within the
container and is never worse than dangerous; a container without host mounts is not looked into
(`docker run --rm alpine sh -c 'rm -rf /tmp/*'` is safe). A container that shares the host's process namespace
(`--pid=host`) and is privileged (or has CAP_SYS_ADMIN) acts on the host itself — `nsenter -t 1` enters PID 1's
namespaces, `reboot` reboots the host, a signal reaches every host process — so its command keeps its full
weight; sharing the process namespace alone gives that weight to commands that signal processes (`kill -9 -1`)
and to `nsenter`. The same holds for `kubectl debug node/X -- ...`: the node's / is at /host.
Leaving a container is dangerous by itself: `--privileged`, the host's namespaces, host system paths or a
secret mounted into it, `nsenter`, `chroot` (`r_container_escape`).
"""

from __future__ import annotations

import re
from typing import Iterator

from agent.safety.classifier.lazy import lazy_re
from agent.safety.classifier.paths import secret_label
from agent.safety.classifier.vocabulary import DANGEROUS, HARDLINE, Call, Finding, Hit, Recurse, by_name, parse

_RUN_FLAGS = frozenset("rm privileged init interactive tty detach read-only publish-all help no-healthcheck "
                       "oom-kill-disable quiet sig-proxy disable-content-trust".split())
_RUN_SHORT = "acehlmpuvw"  # short options of docker run that take a value


def run_parts(args: list[str]) -> tuple[list[tuple[str, str]], list[str]]:
    """(options as (name, value), the command after the image) of `docker run ARGS`."""
    opts, i = [], 0
    while i < len(args):
        a = args[i]
        if a == "--":
            i += 1
            break
        if a.startswith("--"):
            k, eq, v = a[2:].partition("=")
            if not eq and k not in _RUN_FLAGS and i + 1 < len(args):
                i, v = i + 1, args[i + 1]
            opts.append((k, v))
        elif a.startswith("-") and len(a) > 1:
            for j, ch in enumerate(a[1:], start=2):
                if ch in _RUN_SHORT:
                    if not a[j:] and i + 1 < len(args):
                        i += 1
                    opts.append((ch, a[j:] or args[i]))
                    break
                opts.append((ch, ""))
        else:
            break
        i += 1
    return opts, args[i + 1:]


def host_mounts(opts: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """(host path, container path) of the bind mounts and devices; --privileged shows the host's /dev."""
    out = []
    for k, v in opts:
        if k in ("v", "volume") and v.count(":") >= 1:
            src, dst = v.split(":")[:2]
        elif k == "mount":
            f = dict(x.partition("=")[::2] for x in v.split(","))
            src, dst = f.get("source") or f.get("src") or "", f.get("target") or f.get("destination") or f.get("dst")
        elif k == "device" and v:
            src, _, dst = v.partition(":")
            dst = dst.split(":")[0] if dst.startswith("/") else src
        elif k == "privileged" and v in ("", "true"):
            src, dst = "/dev", "/dev"
        else:
            continue
        if src.startswith(("/", "~", "$", ".")) and dst and dst.startswith("/") and dst.rstrip("/"):
            out.append((src, dst.rstrip("/")))
    return out


def on_host(words: list[str], mounts: list[tuple[str, str]]) -> tuple[list[str], bool]:
    """`words` with each container path under a mount written as the host path; whether any was."""
    touched, out = False, []
    for w in words:
        for src, dst in sorted(mounts, key=lambda m: -len(m[1])):
            def host(m: re.Match, src: str = src) -> str:
                rest = m.string[m.end():m.end() + 1]
                return src.rstrip("/") if rest == "/" else src.rstrip("/") or "/"
            w, n = re.subn(r"(?<![\w.~/$-])" + re.escape(dst) + r"(?=/|$|[\s'\";|&)<>,:*])", host, w)
            touched = touched or n > 0
        out.append(w)
    return out, touched


_SIGNALS = frozenset("kill pkill killall killall5 skill".split())


def host_processes(opts: list[tuple[str, str]], command: list[str]) -> str | None:
    """Why a container's command acts on the host itself: it shares the host's process namespace and is privileged
    (nsenter -t 1 enters the host, reboot(2) reboots it), or it signals processes there; else None."""
    if not any(k == "pid" and v == "host" for k, v in opts):
        return None
    privileged = any(k == "privileged" and v in ("", "true") or k == "cap-add" and v.lower().removeprefix("cap_") in (
        "all", "sys_admin") for k, v in opts)
    if privileged or command[:1] and command[0].rsplit("/", 1)[-1] in _SIGNALS | {"nsenter"}:
        return "the host's processes shared" + (" and privileges" if privileged else "")
    return None


_DOCKER_BAD = {"stop", "kill", "rm", "rmi", "prune", "down", "pause", "restart", "reset"}
_DOCKER_GROUPS = {"container", "image", "volume", "network", "system", "builder", "buildx", "service", "stack",
                  "secret", "config", "node", "plugin", "swarm", "compose"}


_COMPOSE_LONG = ("file", "project-name", "profile", "env-file", "project-directory")


def r_docker(c: Call) -> Iterator[Finding]:
    rest = parse(c.args, short="Hcl", long=("host", "context", "config", "log-level", "tlscacert", "tlscert",
                                            "tlskey"), stop=True).rest
    compose = c.name.endswith("-compose") or rest[:1] == ["compose"]
    if compose:
        rest = parse(rest if c.name.endswith("-compose") else rest[1:], "fp", _COMPOSE_LONG, stop=True).rest
        if rest[:1] and rest[0] in ("down", "rm", "kill", "stop"):
            yield Hit(DANGEROUS, f"compose {rest[0]}", c.shown)
    verb = rest[0] if rest else ""
    if verb == "exec":  # docker exec [opts] CONTAINER cmd..., compose exec [opts] SERVICE cmd...
        e = parse(rest[1:], "euw", ("env", "user", "workdir", "env-file", "detach-keys", "index"), stop=True)
        if len(e.rest) > 1:
            yield Recurse("argv", tuple(e.rest[1:]), f"{c.name} exec", cap=DANGEROUS)
    elif verb in ("run", "create") and not compose:
        opts, command = run_parts(rest[1:])
        if any(k in ("v", "volume", "mount") and re.match(r"/:|(?:.*,)?(?:source|src)=/(?:,|$)", v) for k, v in opts):
            yield Hit(DANGEROUS, "host root mounted into a container", c.shown)
        mounts = host_mounts(opts)
        command = [v for k, v in opts if k == "entrypoint" and v][-1:] + command
        host = host_processes(opts, command)
        if (mounts or host) and command:
            words, touched = on_host(command, mounts)
            user = next((v for k, v in opts if k in ("u", "user")), "root").split(":")[0]
            yield Recurse("argv", tuple(words), f"{c.name} {verb} with {host or 'host paths mounted'}" + (
                " as root" if user in ("root", "0") else ""), cap=HARDLINE if touched or host else DANGEROUS)
    elif not compose:
        words = [w for w in rest[:3] if not w.startswith("-")]
        group = bool(words) and words[0] in _DOCKER_GROUPS
        action = words[1] if group and len(words) > 1 else words[0] if words else ""
        if action in _DOCKER_BAD or action in ("remove", "delete", "leave"):
            yield Hit(DANGEROUS, f"{c.name} {' '.join(words[:2]) if group else action}", c.shown)


def r_kubectl(c: Call) -> Iterator[Finding]:
    o = parse(c.args, short="nlcs", long=("namespace", "context", "cluster", "kubeconfig", "user", "selector",
                                          "server", "token", "container"))
    sub = o.pos[0] if o.pos else ""
    if c.name == "helm":
        if sub in ("uninstall", "delete", "del", "un"):
            yield Hit(DANGEROUS, "helm uninstall", c.shown)
    elif sub in ("delete", "drain"):
        yield Hit(DANGEROUS, f"kubectl {sub}", c.shown)
    elif sub == "exec" and "--" in c.args:
        yield Recurse("argv", tuple(c.args[c.args.index("--") + 1:]), "kubectl exec", cap=DANGEROUS)
    elif sub == "debug" and any(p.startswith(("node/", "nodes/")) for p in o.pos) and "--" in c.args:
        # a node debug pod: the node's / at /host, its processes and network shared
        words, touched = on_host(c.args[c.args.index("--") + 1:], [("/", "/host")])
        yield Recurse("argv", tuple(words), "kubectl debug node (the node's / at /host)",
                      cap=HARDLINE if touched or words[:1] == ["nsenter"] else DANGEROUS)


def r_infra(c: Call) -> Iterator[Finding]:
    a = c.args
    if c.name in ("terraform", "tofu", "pulumi", "cdk"):
        if "destroy" in a or (a[:1] == ["apply"] and "-destroy" in a):
            yield Hit(DANGEROUS, f"{c.name} destroy", c.shown)
    elif c.name == "aws":
        if (a[:2] == ["s3", "rm"] and "--recursive" in a) or a[:2] == ["s3", "rb"] or any(
                w.startswith(("delete-", "terminate-")) for w in a if not w.startswith("-")):
            yield Hit(DANGEROUS, "deleting cloud resources", c.shown)
    elif "delete" in a:
        yield Hit(DANGEROUS, "deleting cloud resources", c.shown)


# ---------------------------------------------------------------- leaving a container

_ESCAPE_FLAGS = lazy_re(r"--privileged(=true)?$|--(pid|ipc|uts|userns|cgroupns)(=|$)host|--net(work)?=host$"
                        r"|--cap-add(=|$)(all|sys_admin|sys_ptrace|sys_module|dac_read_search|sys_rawio)"
                        r"|--security-opt(=|$)(apparmor[=:]unconfined|seccomp[=:]unconfined|label[=:]disable)"
                        r"|--device(=|$)/dev/(sd|nvme|mem|kmem|kmsg)", re.I)
_HOST_MOUNTS = lazy_re(r"^(/|/etc|/root|/home|/proc|/sys|/dev|/boot|/var/run/docker\.sock|/run/docker\.sock"
                       r"|/var/run|/run|/var/lib/docker|~)(/)?:|(source|src)=(/|/etc|/root|/var/run/docker\.sock"
                       r"|/run/docker\.sock)(,|$)")


def r_container_escape(c: Call) -> Iterator[Finding]:
    if c.name == "nsenter":
        yield Hit(DANGEROUS, "entering another process's namespaces (nsenter)", c.shown)
        return
    if c.name == "chroot":
        yield Hit(DANGEROUS, "chroot", c.shown)
        return
    if c.name not in ("docker", "podman", "nerdctl"):
        return
    if not any(w in ("run", "create", "exec") for w in c.args[:4]):
        return
    joined = []
    for k, a in enumerate(c.args):  # --flag value → --flag=value
        if a.startswith("--") and "=" not in a and k + 1 < len(c.args) and not c.args[k + 1].startswith("-") and \
                a in ("--pid", "--ipc", "--uts", "--userns", "--net", "--network", "--cap-add", "--security-opt",
                      "--device", "--cgroupns"):
            joined.append(f"{a}={c.args[k + 1]}")
        else:
            joined.append(a)
    bad = [a for a in joined if _ESCAPE_FLAGS.match(a)]
    mounts = [c.args[k + 1] for k, a in enumerate(c.args[:-1]) if a in ("-v", "--volume", "--mount")]
    mounts += [a.partition("=")[2] for a in c.args if a.startswith(("--volume=", "--mount=", "-v="))]
    if any(_HOST_MOUNTS.search(m) for m in mounts):
        bad.append("a host system path mounted")
    if any(secret_label(m.split(":")[0].partition("=")[2] if "=" in m.split(":")[0] else m.split(":")[0])
           for m in mounts):
        bad.append("a secret mounted into it")
    if bad:
        yield Hit(DANGEROUS, f"container with host access ({bad[0]})", c.shown)


RULES = by_name((("docker", "podman", "nerdctl", "nsenter", "chroot"), r_container_escape))
