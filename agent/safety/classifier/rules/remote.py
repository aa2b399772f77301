"""Rules for what lives elsewhere: cloud accounts, clusters and virtual machines, code hosting,
secret stores, tunnels that open this machine to the internet, and uploads of secrets.

Cloud CLIs share one grammar (`TOOL [group...] VERB [name] [--options]`), so one table of verbs
decides: a verb that deletes, stops or resets (`delete`, `destroy`, `rb`, `terminate-instances`,
`apps:destroy`, `pg:reset`), grants access or mints credentials (`add-iam-policy-binding`,
`create-access-key`, `role assignment create`) or prints a secret (`get-secret-value`,
`print-access-token`, `pass show`) asks first; listing and describing do not. Also:

* making data public is granting access to everyone: an ACL or policy verb (`put-bucket-acl`,
  `put-public-access-block`), or an option naming everyone (`--acl public-read`, `allUsers`,
  `--public-access blob`) — dangerous, like publishing a package;
* a change to infrastructure whose own confirmation is turned off (`terraform apply -auto-approve`)
  applies a plan nobody saw, which may replace or destroy resources: dangerous (`terraform apply`
  shows the plan and asks; a saved plan file was reviewed). The project's corpus keeps `pulumi up
  --yes` safe, so only terraform's flag is weighed;
* manifests applied from the network (`kubectl apply -f https://...`, `curl ... | kubectl apply -f -`)
  are download-and-execute for a cluster: dangerous;
* history rewritten from its first commit (`git rebase --root`), and the whole repository (`--all`,
  `--mirror`, `refs/*`) pushed to a URL or to a remote this same line added under a new name, copy or
  destroy what others rely on: dangerous. Pushing a branch, or a first push to a new `origin`, is not;
* a remote command that runs whatever arrives on its stdin (`ssh host 'bash -s' < setup.sh`) runs code
  the check cannot read on a machine no sandbox covers: dangerous (the guard applies `reads_stdin`).
"""

from __future__ import annotations

import re
from typing import Iterator

from agent.safety.classifier.flow import SHELLS
from agent.safety.classifier.lazy import lazy_re
from agent.safety.classifier.paths import private_path, secret_label
from agent.safety.classifier.rules.data import DATA_CLIS
from agent.safety.classifier.vocabulary import DANGEROUS, Call, Finding, Hit, by_name, parse

_CLOUD = frozenset("""aws gcloud gsutil az doctl hcloud openstack linode-cli oci ibmcloud scw exo vultr-cli civo
    flyctl fly heroku vercel netlify firebase supabase wrangler railway render eksctl serverless sls sam terragrunt
    pulumi cdk cdktf s3cmd rclone mc b2 azcopy kind minikube k3d upctl hcp doppler fastly""".split())
_DESTROY = frozenset("""delete destroy remove rm rb del terminate purge undeploy deallocate stop reset wipe teardown
    uninstall deletefile rmdir rmdirs cleanup nuke force-unlock""".split())
_AWS_VERB = lazy_re(r"(delete|terminate|remove|deregister|purge|revoke|disable|detach|stop|reboot|cancel|"
                    r"disassociate|release|deactivate|reset|batch-delete|schedule-key-deletion|empty)(-|$)")
_NON_AWS_VERB = lazy_re(r"(delete|destroy|remove|purge|terminate|stop|reset)-")
_GRANTS = lazy_re(r"^(attach-\w+-policy|put-\w+-policy|create-access-key|create-login-profile|update-login-profile|"
                  r"update-assume-role-policy|add-user-to-group|create-policy-version|set-default-policy-version|"
                  r"authorize-security-group-ingress|add-iam-policy-binding|set-iam-policy|create-for-rbac|"
                  r"get-authorization-token|modify-snapshot-attribute|modify-image-attribute|put-\w*-?acl|"
                  r"put-public-access-block|delete-public-access-block|put-bucket-website|set-acl)$")
_PUBLIC = lazy_re(r"public-read|authenticated-read|\ball(authenticated)?users\b|acs\.amazonaws\.com/groups/global"
                  r"|^--publicly-accessible$|^--public-access=(blob|container)$|^--acl-public$", re.I)
_SECRET_VERBS = lazy_re(r"^(get-secret-value|get-password-data|print-access-token|print-identity-token|"
                        r"get-access-token|batch-get-secret-value|auth:token|decrypt)$")


def _words(args: list[str]) -> list[str]:
    out, skip = [], False
    for a in args:
        if a == "--":
            break
        if skip:
            skip = False
        elif a.startswith("-"):
            skip = "=" not in a and a in ("-n", "-g", "--name", "--resource-group", "--project", "--profile",
                                          "--region", "--zone", "--app", "-a", "--stage", "-s", "--output", "-o")
        else:
            out.append(a.lower())
    return out


def r_cloud(c: Call) -> Iterator[Finding]:
    a, words = c.args, _words(c.args)
    if any(x in ("--help", "-h", "help") for x in a[:3]):
        return
    joined = " ".join(words)
    verbs = [w.rsplit(":", 1)[-1] for w in words[:4]]
    public = any(_PUBLIC.search(x) or x == "--public-access" and a[k + 1:k + 2] in (["blob"], ["container"])
                 for k, x in enumerate(a))
    if any(_GRANTS.match(w) for w in words[:4]) or re.search(r"\brole assignment create\b|\bkeys create\b|"
                                                             r"\bcreate-for-rbac\b", joined) or public:
        yield Hit(DANGEROUS, f"grants access, makes data public or creates credentials ({c.name})", c.shown)
    elif any(_SECRET_VERBS.match(w) for w in words[:4]) or re.search(
            r"\bsecrets versions access\b|\bkeyvault secret (show|download)\b|\bconfigure get \S*(secret|key|token)"
            r"|\bkeys list\b|\blist-keys\b|\bconnection-string show\b",
            joined) or c.name == "aws" and "get-parameter" in " ".join(words[:3]) and "--with-decryption" in a:
        yield Hit(DANGEROUS, f"prints a secret ({c.name})", c.shown)
    elif c.name == "aws" and (any(_AWS_VERB.match(w) for w in words[1:3]) or words[:2] == ["s3", "sync"] and
                              "--delete" in a or words[:2] in (["s3", "rm"], ["s3", "rb"])):
        yield Hit(DANGEROUS, "deleting, stopping or changing access to cloud resources", c.shown)
    elif c.name != "aws" and any(v in _DESTROY or _NON_AWS_VERB.match(v) for v in verbs):
        yield Hit(DANGEROUS, f"deleting or stopping cloud resources ({c.name})", c.shown)
    elif c.name in ("terraform", "tofu", "pulumi") and re.search(r"\b(state (rm|mv|push|delete)|workspace delete|"
                                                                r"stack rm|taint|force-unlock)\b", joined):
        yield Hit(DANGEROUS, f"changes or deletes infrastructure state ({c.name})", c.shown)
    elif c.name in ("terraform", "tofu", "terragrunt") and "apply" in words[:3] and any(
            x.lstrip("-") in ("auto-approve", "terragrunt-non-interactive") for x in a) and not _saved_plan(a):
        yield Hit(DANGEROUS, f"applies infrastructure changes nobody reviewed ({c.name} apply -auto-approve)", c.shown)
    for k, w in enumerate(words[:3]):  # uploads of private data: aws s3 cp SRC DST, gsutil cp, rclone copy, ...
        if w in ("cp", "mv", "copy", "copyto", "move", "sync", "put", "mirror", "rsync", "upload"):
            pos = [x for x in a if not x.startswith("-")]
            at = next((i for i, x in enumerate(pos) if private_path(x)), None)
            if at is not None and any("://" in x or ":" in x.split("/")[0] for x in pos[at + 1:]):  # (then a remote)
                yield Hit(DANGEROUS, f"copies {private_path(pos[at])} to the cloud", c.shown)
            break


def _saved_plan(args: list[str]) -> bool:
    """`terraform apply [options] PLANFILE`: a plan already shown (by `terraform plan -out`)."""
    rest, k = args[args.index("apply") + 1:] if "apply" in args else [], 0
    while k < len(rest) and rest[k].startswith("-"):
        k += 2 if "=" not in rest[k] and rest[k].lstrip("-") in ("var", "var-file", "target", "replace", "state",
                                                                 "state-out", "backup", "lock-timeout", "parallelism") else 1
    return k < len(rest)


def r_kube_more(c: Call) -> Iterator[Finding]:
    a, words = c.args, [x for x in c.args if not x.startswith("-")]
    sub = words[0] if words else ""
    text = " ".join(a)
    if c.name not in ("kubectl", "oc", "helm"):
        if any(w in ("rm", "rmi", "rmp", "stop", "stopp", "kill", "delete", "remove", "del") for w in words[:3]):
            yield Hit(DANGEROUS, f"{c.name}: removes or stops containers", c.shown)
        return
    if sub == "scale" and re.search(r"--replicas[= ]0\b", text) or sub == "rollout" and words[1:2] in (
            ["restart"], ["undo"]) or sub in ("cordon", "taint", "uncordon") or sub == "replace" and "--force" in a \
            or sub == "apply" and ("--prune" in a or "--force" in a):
        yield Hit(DANGEROUS, f"kubectl {sub}: changes what runs in the cluster", c.shown)
    elif sub in ("apply", "create", "replace") and any(
            re.match(r"https?://|git@|git::|github\.com/|gitlab\.com/", v) or v == "-" and c.stdin_kind == "download"
            for k, x in enumerate(a) for v in (
                [a[k + 1]] if x in ("-f", "--filename", "-k", "--kustomize") and k + 1 < len(a) else
                [x.partition("=")[2]] if x.startswith(("--filename=", "--kustomize=", "-f=")) else [])):
        yield Hit(DANGEROUS, f"kubectl {sub} of manifests fetched from the network", c.shown)
    elif sub == "debug" and any(w.startswith("node/") for w in words) or sub == "run" and re.search(
            r"privileged\"?\s*:\s*true|host(PID|Network|IPC)\"?\s*:\s*true|hostPath", text):
        yield Hit(DANGEROUS, "a pod with host access", c.shown)
    elif sub == "create" and words[1:2] and words[1] in ("clusterrolebinding", "rolebinding", "token"):
        yield Hit(DANGEROUS, f"kubectl create {words[1]}: grants access or makes credentials", c.shown)
    elif sub == "create" and words[1:2] == ["cronjob"]:
        yield Hit(DANGEROUS, "kubectl create cronjob: runs something on a schedule", c.shown)
    elif sub == "get" and words[1:2] and words[1] in ("secret", "secrets") and len(words) > 2 and any(
            x.startswith(("-o", "--output")) for x in a) or sub == "config" and "view" in words and "--raw" in a:
        yield Hit(DANGEROUS, "prints cluster secrets", c.shown)


def r_code_hosting(c: Call) -> Iterator[Finding]:
    a, words = c.args, [x for x in c.args if not x.startswith("-")]
    text = " ".join(a)
    if c.name in ("gh", "glab", "hub", "tea", "bb"):
        if any(w in ("delete", "remove", "rm", "archive", "transfer") for w in words[:3]) or re.search(
                r"(-X|--method)[= ]?(DELETE|delete)\b", text) or "--visibility" in text and "public" in text or \
                "--public" in a and any(x.startswith(("--source", "--push")) for x in a):
            yield Hit(DANGEROUS, f"{c.name}: deletes or exposes a repository or its data", c.shown)
        elif words[:2] == ["auth", "token"]:
            yield Hit(DANGEROUS, f"prints the {c.name} token", c.shown)
    elif c.name == "hg":
        sub = words[0] if words else ""
        if sub in ("strip", "purge", "clean", "rollback", "prune") or sub in ("update", "up", "checkout", "co") and \
                any(x in ("-C", "--clean") for x in a) or sub == "revert" and any(x in ("-a", "--all") for x in a) \
                or sub == "push" and any(x in ("-f", "--force") for x in a):
            yield Hit(DANGEROUS, f"hg {sub}: discards work or history", c.shown)
    elif c.name == "svn":
        sub = words[0] if words else ""
        if sub in ("delete", "del", "remove", "rm") and any("://" in w for w in words) or sub == "revert" and any(
                x in ("-R", "--recursive") or x == "--depth=infinity" for x in a) or sub == "cleanup" and any(
                x.startswith("--remove-") for x in a):
            yield Hit(DANGEROUS, f"svn {sub}: discards work or deletes from the repository", c.shown)


def r_git_more(c: Call) -> Iterator[Finding]:
    g = parse(c.args, "Cc", ("git-dir", "work-tree", "namespace", "exec-path", "config-env"), stop=True)
    sub, rest = (g.rest[0], g.rest[1:]) if g.rest else ("", [])
    words = [x for x in rest if not x.startswith("-")]
    if sub == "remote" and words[:1] in (["add"], ["set-url"]) and len(words) > 2 and words[1] != "origin":
        c.memo.setdefault("git remotes", set()).add(words[1])
    elif sub == "rebase" and "--root" in rest:
        yield Hit(DANGEROUS, "rewriting history from the first commit (git rebase --root)", c.shown)
    elif sub == "push" and words and (words[0] in c.memo.get("git remotes", ()) or re.match(
            r"\w+://|[\w.-]+@[\w.-]+:", words[0])) and ("--all" in rest or "--mirror" in rest or any(
            re.match(r"\+?(refs/(heads/|tags/)?)?\*", w) for w in words[1:])):
        yield Hit(DANGEROUS, "pushes the whole repository to a new destination", c.shown)
    if sub == "switch" and any(x in ("-f", "--force", "--discard-changes") for x in rest) or sub == "update-ref" \
            and any(x in ("-d", "--stdin") for x in rest) or sub == "worktree" and rest[:1] == ["remove"] and any(
            x in ("-f", "--force") for x in rest) or sub == "symbolic-ref" and "-d" in rest:
        yield Hit(DANGEROUS, f"git {sub}: discards work or deletes a ref", c.shown)


_SECRET_STORES = {  # program -> subcommands that print a secret ("*": any positional that is not a listed safe one)
    "pass": {"show", "*"}, "gopass": {"show", "cat", "otp"}, "vault": {"read", "kv get", "kv read"},
    "op": {"read", "item get", "inject"}, "bw": {"get"}, "lpass": {"show"}, "secret-tool": {"lookup"},
    "keyring": {"get"}, "heroku": {"auth:token"}, "doctl": {"auth token"}, "docker-credential-helper": {"get"},
    "git": {"credential fill"}, "security": {"find-generic-password", "find-internet-password", "dump-keychain"},
    "unshadow": {"*"}, "gpg": set(), "gpg2": set(),
}
_STORE_SAFE = {"ls", "list", "find", "search", "init", "git", "grep", "generate", "insert", "edit", "status", "login",
               "logout", "whoami", "version", "help", "sync", "unlock", "lock"}


def r_secret_stores(c: Call) -> Iterator[Finding]:
    words = [x for x in c.args if not x.startswith("-")]
    verbs = _SECRET_STORES.get(c.name, set())
    if c.name in ("gpg", "gpg2"):
        if any(x.startswith(("--export-secret", "--export-ssh-key")) for x in c.args):
            yield Hit(DANGEROUS, "exports private keys (gpg)", c.shown)
        return
    if c.name == "security" and words[:1] and words[0].startswith("find-") and not any(
            x in ("-w", "-g") or re.fullmatch(r"-\w*[wg]\w*", x) for x in c.args):
        return
    two = " ".join(words[:2])
    if words and (words[0] in verbs or two in verbs or "*" in verbs and words[0] not in _STORE_SAFE):
        yield Hit(DANGEROUS, f"prints a secret from a password store ({c.name})", c.shown)


_TUNNELS = {"ngrok": {"http", "tcp", "tls", "start", "tunnel"}, "cloudflared": {"tunnel", "access"},
            "lt": {"*"}, "localtunnel": {"*"}, "bore": {"local"}, "tailscale": {"funnel", "serve"},
            "frpc": {"*"}, "chisel": {"client", "server"}, "serveo": {"*"}, "zrok": {"share"}, "pinggy": {"*"}}


def r_tunnels(c: Call) -> Iterator[Finding]:
    verbs = _TUNNELS[c.name]
    words = [x for x in c.args if not x.startswith("-")]
    if any(x in ("--help", "-h", "version", "--version") for x in c.args):
        return
    if "*" in verbs and c.args or words[:1] and words[0] in verbs or c.name == "cloudflared" and "--url" in " ".join(
            c.args):
        yield Hit(DANGEROUS, f"opens this machine to the internet ({c.name})", c.shown)


def r_http_delete(c: Call) -> Iterator[Finding]:
    text = " ".join(c.args)
    if re.search(r"(?:^|\s)(?:-X\s*|--request[= ]|--method[= ])['\"]?DELETE\b", text, re.I) or c.name in (
            "http", "https", "xh") and any(x.upper() == "DELETE" for x in c.args[:3]) or "/_delete_by_query" in text:
        yield Hit(DANGEROUS, "HTTP DELETE: deletes something on a server", c.shown)


_STDIN_RUNNERS = SHELLS | {"python", "python3", "perl", "ruby", "node", "php"}


def reads_stdin(words: list[str]) -> bool:
    """`bash -s`, `sh`, `sudo bash`, `python3 -`: a remote command that runs whatever arrives on its stdin."""
    w = " ".join(words).replace("'", " ").replace('"', " ").split()
    at = next((k for k, x in enumerate(w[:5]) if x.rsplit("/", 1)[-1] in _STDIN_RUNNERS), None)
    if at is None or not all(x in ("sudo", "doas", "env", "exec", "nohup") or x.startswith("-") for x in w[:at]):
        return False
    rest = w[at + 1:]
    return "-s" in rest or "-" in rest or not [x for x in rest if not x.startswith("-")]


def r_socat_files(c: Call) -> Iterator[Finding]:
    for arg in c.args:
        m = re.match(r"(?i)(?:file|open|gopen|exec)?:?([^,]+)", arg.split(":", 1)[1] if ":" in arg else "")
        if arg.lower().startswith(("file:", "open:", "gopen:")) and m and (label := secret_label(m.group(1))):
            yield Hit(DANGEROUS, f"reads {label}", c.shown)
            return


RULES = by_name(
    (_CLOUD | DATA_CLIS | {"terraform", "tofu"}, r_cloud),
    (("kubectl", "oc", "helm", "crictl", "ctr", "nerdctl"), r_kube_more),
    (("gh", "glab", "hub", "tea", "bb", "hg", "svn"), r_code_hosting), (("git",), r_git_more),
    (tuple(_SECRET_STORES), r_secret_stores), (tuple(_TUNNELS), r_tunnels),
    (("curl", "wget", "http", "https", "xh", "gh"), r_http_delete), (("socat",), r_socat_files))
