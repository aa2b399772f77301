"""Shell escapes of ordinary programs (the GTFOBins "shell", "command", "suid" and "sudo" shapes), for
the classifier. The principles:

* A program made to start a shell or an interpreter with nothing to run is a shell escape — the way a restricted
  or sudo-granted program is turned into a shell, and what that shell then does is not in the line: through its
  own way of running commands (`find . -exec /bin/sh \\; -quit`, `lua -e 'os.execute("/bin/sh")'`, `python3 -c
  'import pty; pty.spawn("/bin/bash")'`, `awk 'BEGIN{system("/bin/sh")}'`; `escape`) or as a wrapper on the
  terminal (`env /bin/sh`, `nice bash`, `stdbuf -i0 /bin/sh`, `busybox sh`; `execution.wrapper_hits`).
  Dangerous. A shell typed directly (`bash`, `exec bash`), sudo's own (`sudo -i` is an interactive root shell,
  a rule of its own), a container's shell (`docker exec -it web sh`) and a remote login are not escapes; a shell
  given a script, `-c` code or piped input is judged by that.
* An option whose value is a command some program runs — `tcpdump -z CMD` (after each capture file), `wget
  --use-askpass`, `nano -s` (the spell checker), `sort --compress-program`, `aria2c --on-download-complete`,
  `mysql --pager`, `svn --editor-cmd`, `cpio --rsh-command`, `borg --rsh`, `rpm --pipe`, `git clone -u`/`push
  --receive-pack`/`difftool -x`/`send-email --to-cmd`/`--exec-path=DIR`, `gem open -e`, `apt-get -o
  APT::Update::Pre-Invoke::=CMD`, `hg --config hooks.x=CMD`, `busctl --address=unixexec:path=...` — is dangerous
  unless its program is the ordinary one (`tcpdump -z gzip`, `rsync --rsync-path='sudo rsync'`), and the value is
  judged as a command too (`RUN_OPTIONS`, the same rule as `execution`'s tables).
* Code given on the command line in a language whose programs spawn processes: rpm macros (`%(cmd)`, `%{lua:..}`),
  puppet manifests (`puppet apply -e "exec {'cmd': }"`), rake (`rake -e`), and the interpreters the code scanner
  reads besides those the guard knows: R, julia, guile/racket (scheme), sbcl/clisp, groovy, jrunscript/jjs, elixir,
  octave, gnuplot, dc, raku, ipython, ts-node (`EXTRA_INTERPRETERS`).
* A program's own command language that has a shell escape — `!cmd` in ed, dc, gnuplot, ipython and GNU mail's
  `--exec`, `platform shell` in lldb, `nmap --interactive` — runs that command: dangerous, and judged as typed.
* A setuid or setgid copy of a program (`install -m 4755 /bin/sh /tmp/.sh`, `rsync --chmod=u+s`; `chmod u+s` has its
  own rule) gives whoever runs it the owner's rights: privilege escalation, dangerous as `chmod u+s` is, and named
  so when the copy is a shell or interpreter. Not hardline: setuid helpers are sometimes installed on purpose.
* Loading a shared library from outside the system's library folders into a program (`ssh-keygen -D ./lib.so`,
  `openssl req -engine ./x.so`, `ssh -I ./p11.so`) runs its code: dangerous.
"""

from __future__ import annotations

import re
from typing import Iterator

from agent.safety.classifier.flow import SHELLS
from agent.safety.classifier.lazy import lazy_re
from agent.safety.classifier.rules.execution import COMPRESSORS, EDITORS, PAGERS, SSH_CLIENTS, runs
from agent.safety.classifier.vocabulary import DANGEROUS, Call, Finding, Hit, Recurse, by_name, parse

# ---------------------------------------------------------------- interactive shells started by other programs

_CODE_LANGS = frozenset("python perl ruby node php lua tcl awk applescript r julia scheme lisp groovy elixir octave "
                        "gnuplot raku ipython haskell slang".split())


def escape(via: tuple) -> str | None:
    """The rule when an interactive shell or interpreter was started by a program's own way of running commands
    (find -exec, a code one-liner's system()/exec/spawn), not by a wrapper, a shell or a remote login."""
    hop = via[-1] if via else ""
    if hop.startswith("find -") or hop.split(" ", 1)[0] in _CODE_LANGS or hop == "do shell script":
        return f"shell escape: {hop} starts an interactive shell or interpreter"
    return None


# ---------------------------------------------------------------- interpreters the guard adds to its own

EXTRA_INTERPRETERS = {"rscript": "r", "tclsh": "tcl", "wish": "tcl", "expect": "tcl", "r": "r", "julia": "julia",
                      "guile": "scheme", "racket": "scheme", "chicken-csi": "scheme", "csi": "scheme", "sbcl": "lisp",
                      "clisp": "lisp", "ecl": "lisp", "groovy": "groovy",
                      "jrunscript": "node", "jjs": "node", "ts-node": "node", "elixir": "elixir", "octave": "octave",
                      "octave-cli": "octave", "gnuplot": "gnuplot", "dc": "dc", "raku": "raku", "perl6": "raku",
                      "rakudo": "raku", "ipython": "ipython", "ipython3": "ipython", "runghc": "haskell",
                      "runhaskell": "haskell", "ghc": "haskell", "jython": "python", "slsh": "slang"}
# lang: (letters giving code, long names giving code, short options taking a value, "run a module" flag)
EXTRA_INTERP_OPTS = {"r": ("e", (), "e", ""), "tcl": ("c", (), "cf", ""), "applescript": ("e", (), "el", ""),
                     "julia": ("eE", ("eval", "print"), "eEpLJCtO", ""),
                     "scheme": ("ce", ("eval", "expr"), "celLx", ""),
                     "lisp": ("x", ("eval",), "xi", ""), "groovy": ("e", (), "e", ""), "elixir": ("e", ("eval",),
                     "erS", ""), "octave": ("", ("eval",), "", ""), "gnuplot": ("e", (), "e", ""),
                     "dc": ("e", ("expression",), "ef", ""), "raku": ("e", (), "eIM", ""), "ipython": ("c", (), "cm",
                     "m"), "haskell": ("e", (), "e", ""), "slang": ("e", (), "e", "")}


# ---------------------------------------------------------------- options whose value is a command

# program -> ((subcommand or "", short options, long options, programs that are its ordinary use), ...)
RUN_OPTIONS = {
    "tcpdump": (("", "z", (), COMPRESSORS),), "wget": (("", "", ("use-askpass",), frozenset()),),
    "nano": (("", "s", ("speller",), frozenset({"aspell", "hunspell", "spell", "ispell"})),),
    "pico": (("", "s", ("speller",), frozenset({"aspell", "hunspell", "spell", "ispell"})),),
    "sort": (("", "", ("compress-program",), COMPRESSORS),),
    "aria2c": (("", "", ("on-download-complete", "on-download-start", "on-download-error", "on-download-pause",
                         "on-download-stop", "on-bt-download-complete"), frozenset()),),
    "mysql": (("", "", ("pager",), PAGERS),), "mariadb": (("", "", ("pager",), PAGERS),),
    "svn": (("", "", ("editor-cmd", "diff-cmd", "diff3-cmd"), EDITORS | frozenset({"diff", "colordiff", "meld"})),),
    "cpio": (("", "", ("rsh-command",), SSH_CLIENTS),), "borg": (("", "", ("rsh",), SSH_CLIENTS),),
    "rsync": (("", "", ("rsync-path",), frozenset({"rsync", "sudo", "doas"})),),
    "rpm": (("", "", ("pipe",), frozenset()),), "gem": (("open", "e", ("editor",), EDITORS),),
    "git": (("clone", "u", ("upload-pack",), frozenset({"git-upload-pack"})),
            ("fetch", "", ("upload-pack",), frozenset({"git-upload-pack"})),
            ("pull", "", ("upload-pack",), frozenset({"git-upload-pack"})),
            ("ls-remote", "", ("upload-pack",), frozenset({"git-upload-pack"})),
            ("archive", "", ("exec",), frozenset({"git-upload-archive"})),
            ("push", "", ("receive-pack", "exec"), frozenset({"git-receive-pack"})),
            ("difftool", "x", ("extcmd",), frozenset({"meld", "vimdiff", "kdiff3", "code", "diff", "colordiff",
                                                      "opendiff", "bcompare", "difft", "delta"})),
            ("send-email", "", ("to-cmd", "cc-cmd", "header-cmd", "sendmail-cmd"), frozenset())),
    "lftp": (("", "", ("rsh",), SSH_CLIENTS),), "sshfs": (("", "", ("ssh-command",), SSH_CLIENTS),),
    "openvpn": (("", "", ("up", "down", "route-up", "route-pre-down", "ipchange", "tls-verify", "client-connect",
                          "client-disconnect", "learn-address", "auth-user-pass-verify"), frozenset()),),
    "split": (("", "", ("filter",), COMPRESSORS),), "gcc": (("", "", ("wrapper",), frozenset()),),
    "g++": (("", "", ("wrapper",), frozenset()),), "cc": (("", "", ("wrapper",), frozenset()),),
}


def r_run_options(c: Call) -> Iterator[Finding]:
    args = [f"-{x}" if x.startswith("-wrapper") else x for x in c.args]  # gcc -wrapper PROG,ARGS
    if c.name in ("gcc", "g++", "cc"):
        args = [x.replace(",", " ") if k and args[k - 1] == "--wrapper" else x for k, x in enumerate(args)]
    sub_at = None
    if c.name == "git":
        rest = parse(args, "Cc", ("git-dir", "work-tree", "namespace", "exec-path", "config-env"), stop=True).rest
        sub_at = len(args) - len(rest)
        if any(a.startswith("--exec-path=") and a != "--exec-path=" for a in args[:sub_at]):
            yield Hit(DANGEROUS, "git --exec-path: runs git's subcommands from another folder", c.shown)
    for sub, short, long, benign in RUN_OPTIONS.get(c.name, ()):
        a = args
        if sub:
            words = [x for x in (args[sub_at:] if sub_at is not None else args) if not x.startswith("-")]
            if words[:1] != [sub]:
                continue
            a = args[args.index(sub) + 1:]
        o = parse(a, short, long)
        name = f"{c.name} {sub}".strip()
        for k in short:
            for v in o.vals.get(k, []):
                yield from runs(v, f"{name} -{k}", c.shown, benign)
        for k in long:
            for v in o.longs.get(k, []):
                yield from runs(v, f"{name} --{k}", c.shown, benign)


_TEX = frozenset("tex latex pdflatex xelatex lualatex pdftex luatex etex".split())
_APT_HOOK = lazy_re(r"(?i)(pre|post)-invoke(-success)?|pre-install-pkgs|::(pre|post)-invoke")


def r_option_code(c: Call) -> Iterator[Finding]:
    """apt -o hooks, rpm macros, puppet -e, rake -e, hg --config, busctl unixexec:, sshfs -o ssh_command, BORG_RSH."""
    n, a = c.name, c.args
    if n in ("apt", "apt-get", "aptitude", "apt-cache"):
        for k, x in enumerate(a):
            v = a[k + 1] if x == "-o" and k + 1 < len(a) else x[2:] if x.startswith("-o") and len(x) > 2 else \
                x.partition("=")[2] if x.startswith("--option=") else None
            if v and _APT_HOOK.search(v.partition("=")[0]):
                yield from runs(v.partition("=")[2], f"{n} -o {v.partition('=')[0]}", c.shown)
    elif n in ("rpm", "rpmquery", "rpmspec", "rpmbuild"):
        for v in parse(a, "ED", ("eval", "define")).vals.get("E", []) + [
                y for k in ("eval", "define") for y in parse(a, "ED", ("eval", "define")).longs.get(k, [])] + \
                parse(a, "ED", ("eval", "define")).vals.get("D", []):
            for m in re.finditer(r"%\((.*)\)", v):
                yield Hit(DANGEROUS, f"{n} macro runs a command", c.shown)
                yield Recurse("shell", m.group(1), f"{n} %(…)")
            for m in re.finditer(r"%\{lua:(.*)\}", v, re.S):
                yield Hit(DANGEROUS, f"{n} macro runs Lua code", c.shown)
                yield Recurse("code", m.group(1), f"{n} lua macro", lang="lua")
    elif n == "puppet" and "apply" in a:
        for v in parse(a, "e", ("execute",)).vals.get("e", []) + parse(a, "e", ("execute",)).longs.get("execute", []):
            yield Hit(DANGEROUS, "puppet apply of a manifest written on the command line", c.shown)
            for m in re.finditer(r"exec\s*\{\s*(['\"])(.*?)\1\s*:", v, re.S):
                yield Recurse("shell", m.group(2), "puppet exec")
    elif n == "rake":
        longs = ("execute", "execute-print", "execute-continue")
        o = parse(a, "epE", longs)
        for v in [x for k in "epE" for x in o.vals.get(k, [])] + [x for k in longs for x in o.longs.get(k, [])]:
            yield Recurse("code", v, "rake -e", lang="ruby")
    elif n == "hg":
        for k, x in enumerate(a):
            v = a[k + 1] if x == "--config" and k + 1 < len(a) else x.partition("=")[2] if x.startswith("--config=") \
                else None
            key, _, value = (v or "").partition("=")
            if re.match(r"(?i)(hooks\.|ui\.(editor|merge|ssh)$|pager\.pager$|merge-tools\.|alias\..*)", key) and value:
                if key.lower().startswith("alias.") and not value.startswith("!"):
                    continue
                yield from runs(value.lstrip("!"), f"hg --config {key}", c.shown, EDITORS | PAGERS | SSH_CLIENTS)
            elif key.lower().startswith("extensions.") and "/" in value:
                yield Hit(DANGEROUS, "hg --config extensions: loads Python code from a file", c.shown)
    elif n in ("busctl", "dbus-send", "gdbus", "dbus-monitor"):
        for x in a:
            m = re.search(r"unixexec:(.*)", x)
            if m:
                parts = dict(p.partition("=")[::2] for p in m.group(1).split(","))
                argv = [parts.get("path", "")] + [v for k, v in sorted(parts.items()) if re.fullmatch(r"argv[1-9]", k)]
                yield Hit(DANGEROUS, f"{n} runs a program as its bus connection (unixexec:)", c.shown)
                yield Recurse("argv", tuple(w for w in argv if w), f"{n} unixexec")
    elif n == "knife" and a[:1] == ["exec"]:
        for v in parse(a[1:], "E", ("exec",)).vals.get("E", []) + parse(a[1:], "E", ("exec",)).longs.get("exec", []):
            yield Recurse("code", v, "knife exec -E", lang="ruby")
    elif n == "gimp" and any("python-fu-eval" in x for x in a):
        for v in parse(a, "b", ("batch",)).vals.get("b", []) + parse(a, "b", ("batch",)).longs.get("batch", []):
            yield Recurse("code", v, "gimp python-fu-eval", lang="python")
    elif n in _TEX and any(x.lstrip("-") in ("shell-escape", "enable-write18") for x in a):
        for x in a:
            for m in re.finditer(r"\\write18\s*\{(.*)\}", x, re.S):
                yield Hit(DANGEROUS, f"{n} runs a shell command (\\write18)", c.shown)
                yield Recurse("shell", m.group(1), f"{n} \\write18")
    elif n == "xdotool" and "exec" in a:
        rest = [x for x in a[a.index("exec") + 1:] if x not in ("--sync", "--args", "--terminator")]
        if rest:
            yield Recurse("argv", tuple(rest), "xdotool exec")
    elif n == "run-parts" and any(re.fullmatch(r"/(usr/)?(local/)?s?bin/?", x) for x in a):
        yield Hit(DANGEROUS, "run-parts over a folder of programs (runs whichever it selects)", c.shown)
    elif n == "csvtool" and "call" in a and a.index("call") + 1 < len(a):
        yield from runs(a[a.index("call") + 1], "csvtool call", c.shown)
    elif n == "service" and any("/" in x for x in a[:1]):
        yield Hit(DANGEROUS, "service given a path: runs that program", c.shown)
    if n in ("sshfs", "restic"):
        for k, x in enumerate(a):
            v = a[k + 1] if x in ("-o", "--option") and k + 1 < len(a) else None
            key, _, value = (v or "").partition("=")
            if key in ("ssh_command", "sftp.command") and value:
                yield from runs(value, f"{n} -o {key}", c.shown, SSH_CLIENTS)


# ---------------------------------------------------------------- command languages with a shell escape

def _bang_lines(text: str) -> list[str]:
    return [m.group(1) for m in re.finditer(r"(?m)^\s*!(.+)$", text)]


def r_bang(c: Call) -> Iterator[Finding]:
    """ed, dc, gnuplot, ipython, mail --exec, lldb -o 'platform shell', nmap --interactive: `!cmd` runs a command."""
    n, a = c.name, c.args
    texts = []
    if n in ("ed", "red", "ex") and c.stdin:
        texts.append(c.stdin)
    elif n in ("mail", "mailx", "s-nail", "bsd-mailx"):
        texts += parse(a, "E", ("exec",)).vals.get("E", []) + parse(a, "E", ("exec",)).longs.get("exec", [])
    elif n == "lldb":
        o = parse(a, "oOkK", ("one-line", "one-line-before-file", "one-line-on-crash", "source"))
        for v in [x for k in "oOk" for x in o.vals.get(k, [])] + o.longs.get("one-line", []) + o.longs.get(
                "one-line-before-file", []):
            m = re.match(r"\s*(?:platform\s+shell|script)\s+(.*)", v, re.S)
            if m:
                texts.append("!" + m.group(1))
    elif n == "nmap" and "--interactive" in a:
        yield Hit(DANGEROUS, "nmap --interactive: a console with a shell escape (!)", c.shown)
    for text in texts:
        for cmd in _bang_lines(text):
            yield Hit(DANGEROUS, f"{n} runs a shell command (!)", c.shown)
            yield Recurse("shell", cmd, f"{n} !")


# ---------------------------------------------------------------- setuid copies and loaded libraries

_SHELLS_AND_CO = SHELLS | frozenset("python python3 perl ruby node php lua env find vim awk busybox".split())


def _setid(mode: str) -> bool:
    return bool(mode) and (bool(re.fullmatch(r"[0-7]*", mode)) and len(mode) == 4 and int(mode[0]) & 6 > 0
                           or bool(re.search(r"[+=][^,]*s", mode)))


def r_setuid_copy(c: Call) -> Iterator[Finding]:
    """install -m 4755 /bin/sh x, rsync/cp with a mode that sets the setuid or setgid bit."""
    a = c.args
    if c.name == "install":
        o = parse(a, "tSmog", ("target-directory", "suffix", "mode", "owner", "group"))
        mode = o.val("m", "mode") or ""
    else:
        mode = next((x.partition("=")[2] for x in a if x.startswith("--chmod=")), "")
        o = parse(a, "", ())
    if _setid(mode) or c.name == "rsync" and re.search(r"[+=][^,]*s", mode):
        shell = any(p.rstrip("/").rsplit("/", 1)[-1] in _SHELLS_AND_CO for p in o.pos[:-1])
        yield Hit(DANGEROUS, "setuid copy of a shell or interpreter (privilege escalation)" if shell else
                  "setuid/setgid bit", c.shown)


_SYSTEM_LIBS = lazy_re(r"^/(usr/)?(local/)?lib(64|32|exec)?/")


def r_library_load(c: Call) -> Iterator[Finding]:
    a = c.args
    libs = [a[k + 1] for k, x in enumerate(a[:-1]) if (c.name == "ssh-keygen" and x == "-D" or c.name == "ssh" and
                                                        x == "-I" or c.name == "openssl" and x == "-engine")]
    libs += [x.split("=", 1)[1] for x in a if re.match(r"(?i)(-oPKCS11Provider|PKCS11Provider)=", x)]
    if any(("/" in x or x.endswith(".so")) and not _SYSTEM_LIBS.match(x) for x in libs):
        yield Hit(DANGEROUS, f"{c.name} loads a library from outside the system's folders (runs its code)", c.shown)


RULES = by_name(
    (tuple(RUN_OPTIONS), r_run_options),
    (("apt", "apt-get", "aptitude", "apt-cache", "rpm", "rpmquery", "rpmspec", "rpmbuild", "puppet", "rake", "hg",
      "busctl", "dbus-send", "gdbus", "dbus-monitor", "sshfs", "restic", "knife", "gimp", "xdotool", "run-parts",
      "service", "csvtool") + tuple(_TEX), r_option_code),
    (("ed", "red", "ex", "mail", "mailx", "s-nail", "bsd-mailx", "lldb", "nmap"), r_bang),
    (("install", "rsync", "cp"), r_setuid_copy), (("ssh-keygen", "ssh", "openssl"), r_library_load))
