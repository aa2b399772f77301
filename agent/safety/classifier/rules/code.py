"""Code one-liners (python, perl, ruby, node, php, lua, awk, ...) and shell text patterns (fork bombs).

`scan_code` reads a snippet the way the guard reads a shell line, only more loosely: calls that
run commands become nested shell or argv checks, recursive deletes, writes to sensitive files,
SQL passed to `execute()` and decoded or downloaded code that is executed become findings.
"""

from __future__ import annotations

import re
from typing import Callable, Iterator

from agent.safety.classifier.lazy import lazy_re
from agent.safety.classifier.paths import is_critical, is_system, secret_label, sensitive_label, write_risk
from agent.safety.classifier.vocabulary import DANGEROUS, HARDLINE, Finding, Hit, Recurse

_LIT = lazy_re(r"'((?:[^'\\\n]|\\.)*)'|\"((?:[^\"\\]|\\.)*)\"")
_ESC = {"n": "\n", "t": "\t", "\\": "\\", "'": "'", '"': '"', "0": "\0"}


def _literals(text: str) -> list[str]:
    return [re.sub(r"\\(.)", lambda m: _ESC.get(m.group(1), "\\" + m.group(1)), m.group(1) if m.group(1) is not None
                   else m.group(2)) for m in _LIT.finditer(text)]


def _region(code: str, start: int) -> str:
    """The argument text of a call whose name ends just before `start`."""
    if start < len(code) and code[start] == "(":
        depth, i, n = 0, start, len(code)
        while i < n:
            ch = code[i]
            if ch in "'\"":
                m = _LIT.match(code, i)
                i = m.end() if m else i + 1
                continue
            depth += ch in "([{"
            depth -= ch in ")]}"
            if depth == 0:
                return code[start + 1:i]
            i += 1
        return code[start + 1:]
    m = re.match(r"[^;\n]*", code[start:])
    return m.group() if m else ""


def _split_args(region: str) -> list[str]:
    parts, depth, cur, i = [], 0, [], 0
    while i < len(region):
        ch = region[i]
        if ch in "'\"" and (m := _LIT.match(region, i)):
            cur.append(m.group())
            i = m.end()
            continue
        depth += ch in "([{"
        depth -= ch in ")]}"
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
        i += 1
    parts.append("".join(cur))
    return [p for p in parts if p.strip()]


_SHELL_CALL = lazy_re(r"(?<![\w$])(system|popen[234]?|spawn(?:Sync)?|exec(?:Sync|File(?:Sync)?|[lv]p?e?)?|"
                      r"check_output|check_call|call|run|Popen|getoutput|getstatusoutput|shell_exec|passthru|"
                      r"proc_open|capture[23]e?|eval|Function|pcntl_exec|system\*|run-program|callCommand|"
                      r"spawnCommand|shell|(?<=[.:])cmd)\s*(\(|(?=['\"\[]))")
_RMTREE = lazy_re(r"(?<![\w$])(rmtree|rm_rf|rm_r|remove_dir|remove_entry(?:_secure)?|remove_tree|rimraf(?:\.sync|Sync)?"
                  r"|rmSync|rmdirSync|rm|rmdir|unlink)\s*(\(|(?=['\"]))")
_HOME_EXPR = lazy_re(r"expanduser|Path\.home|homedir\(|Dir\.home|\bHOME\b")
_OPEN = lazy_re(r"(?<![\w$])(open|fopen|writeFileSync|writeFile|appendFileSync|appendFile|createWriteStream|"
                r"file_put_contents|File\.write)\s*\(")
_PATH_WRITE = lazy_re(r"Path\(\s*[rbfu]*(['\"])([^'\"]+)\1\s*\)\s*\.\s*(?:expanduser\(\)\s*\.\s*)?"
                      r"(?:write_text|write_bytes)")
_DECODE = lazy_re(r"b64decode|decodebytes|decode_base64|atob\s*\(|Base64\.decode64|unpack1?\s*\(\s*['\"]m|"
                  r"\bpack\s*\(?\s*['\"][Hh]|\bunpack\s*\(?\s*['\"][uH]|"
                  r"Buffer\.from\([^)]*base64|base64_decode|codecs\.decode|bytes\.fromhex|unhexlify|"
                  r"zlib\.decompress|marshal\.loads")
_FETCH = lazy_re(r"urlopen|urlretrieve|requests\.(?:get|post)|httpx\.(?:get|post)|fetch\s*\(|LWP::|HTTP::Tiny|"
                 r"Net::HTTP|open-uri|URI\.open|https?\.get\s*\(|file_get_contents\s*\(\s*['\"]https?:|curl_exec")
_EVAL = lazy_re(r"(?<![\w.$])(?:exec|eval|execfile|Function|instance_eval)\s*[(\s'\"]")
_B64_LIT = lazy_re(r"['\"]([A-Za-z0-9+/]{8,}={0,2})['\"]")


def scan_code(lang: str, code: str, decode: Callable[[str], str | None]) -> Iterator[Finding]:
    """Findings in a one-liner of `lang` (python, perl, ruby, node, php, lua, awk, applescript)."""
    if re.search(r"\bfork\b", code) and re.search(r"\bwhile\b|\bloop\b|for\s*\(\s*;\s*;", code):
        yield Hit(HARDLINE, "fork bomb", _clip(code))
    if lang == "python" and re.search(r"os\.kill\(\s*-1\b", code):
        yield Hit(HARDLINE, "killing every process / init", _clip(code))
    for m in _SHELL_CALL.finditer(code):
        name, region = m.group(1), _region(code, m.end() - len(m.group(2)))
        as_code = name in ("eval", "Function") or (name == "exec" and lang == "python")
        args = [a for a in _split_args(region) if not re.match(r"\s*\*{0,2}[A-Za-z_]\w*\s*=(?!=)", a)
                and not a.strip().startswith("{")]
        if not args:
            continue
        if as_code:
            for lit in _literals(args[0]):
                yield Recurse("code", lit, f"{lang} {name}", lang=lang)
        elif len(args) == 1 and not args[0].strip().startswith("["):
            lits = _literals(args[0])
            if lits:
                yield Recurse("shell", " ".join(lits), f"{lang} {name}()")
        else:
            words = [w for a in args for w in _literals(a)]
            if words:
                yield Recurse("argv", tuple(words), f"{lang} {name}()")
    if lang in ("perl", "ruby", "php", "julia"):
        for m in re.finditer(r"`([^`]*)`|(?:\bqx|%x)\s*(?:\{([^}]*)\}|\(([^)]*)\)|/([^/]*)/)", code):
            yield Recurse("shell", next(g for g in m.groups() if g is not None), f"{lang} backticks")
    if lang == "applescript":
        for m in re.finditer(r'do shell script\s+"((?:[^"\\]|\\.)*)"', code):
            yield Recurse("shell", m.group(1), "do shell script")
    if lang == "awk":
        for m in re.finditer(r'print[^|;}]*\|\s*"(?:/bin/)?(?:ba|z|da|k)?sh"', code):
            yield Hit(DANGEROUS, "awk output piped to a shell", _clip(m.group()))
            for lit in _literals(m.group()[:m.group().rfind("|")]):
                yield Recurse("shell", lit, "awk | sh")
    yield from _deletions(code)
    yield from _file_writes(code)
    for m in _PATH_WRITE.finditer(code):
        if risk := write_risk(m.group(2)):
            yield Hit(risk[0], risk[1], _clip(m.group()))
    for m in re.finditer(r"(?<![\w$])(execute|executescript|executemany|query)\s*\(", code):
        lits = _literals((_split_args(_region(code, m.end() - 1)) or [""])[0])
        if lits:
            yield Recurse("sql", " ".join(lits), f"{lang} {m.group(1)}()")
    runs = bool(_EVAL.search(code) or _SHELL_CALL.search(code))
    if runs and _DECODE.search(code):
        yield Hit(DANGEROUS, "decoded payload executed", _clip(code))
        for m in _B64_LIT.finditer(code):
            text = _hex(m.group(1)) or decode(m.group(1))
            if text:
                yield Recurse("code", text, f"{lang} decoded payload", lang=lang)
                yield Recurse("shell", text, f"{lang} decoded payload")
    if _EVAL.search(code) and _FETCH.search(code):
        yield Hit(DANGEROUS, "downloaded code executed", _clip(code))
    yield from scan_more(lang, code)


def _deletions(code: str) -> Iterator[Finding]:
    """Recursive deletes (shutil.rmtree, rm -r like calls), a wipe of / or home above all."""
    for m in _RMTREE.finditer(code):
        region = _region(code, m.end() - len(m.group(2)))
        if m.group(1) in ("rm", "rmdir", "rmSync", "rmdirSync", "unlink") and not re.search(
                r"recursive\s*[:=]\s*(true|TRUE|T\b)", region):
            continue
        first = (_split_args(region) or [""])[0]
        lits = _literals(re.sub(r"require\s*\(\s*['\"][^'\"]*['\"]\s*\)", "", first))
        if _HOME_EXPR.search(first) and all(x in ("~", "~/", "/", "HOME", "") for x in lits):
            target = "~"
        else:
            target = lits[0] if lits else "<dynamic path>"
        part = _clip(f"{m.group(1)}({region})")
        if is_critical(target):
            yield Hit(HARDLINE, "wipe of / or home", part)
        else:
            yield Hit(DANGEROUS, "recursive delete", part)


def _file_writes(code: str) -> Iterator[Finding]:
    """Files opened for writing where a write is a risk (`write_risk`)."""
    for m in _OPEN.finditer(code):
        region = _region(code, m.end() - 1)
        writes, path = m.group(1) not in ("open", "fopen"), None
        for lit in _literals(region):
            s = lit.strip()
            if s[:1] in "<>+" and (">" in s or "+" in s):
                writes = True
                path = path or s.lstrip("+<>").strip() or None
            elif re.fullmatch(r"[rwaxbt+]{1,3}", s):
                writes = writes or bool(set(s) & set("wax+"))
            elif path is None and s:
                path = s
        if writes and path and (risk := write_risk(path)):
            yield Hit(risk[0], risk[1], _clip(f"{m.group(1)}({region})"))


def _clip(s: str, limit: int = 200) -> str:
    s = " ".join(s.split())
    return s if len(s) <= limit else s[:limit - 3] + "..."


# ---------------------------------------------------------------- shell text patterns

_FUNC_DEF = lazy_re(r"(?:\bfunction\s+([^\s(){}|;&<>]{1,40})\s*(?:\(\s*\))?|([^\s(){}|;&<>]{1,40})\s*\(\s*\))"
                    r"\s*\{([^{}]{0,200})\}")


def mask_quotes(text: str) -> str:
    """`text` with quoted strings and comments blanked, so `echo ':(){ :|:& };:'` is no fork bomb."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if c == "\\":
            out.append(text[i:i + 2])
            i += 2
        elif c in "'\"" or (c == "#" and (i == 0 or text[i - 1] in " \t\n;")):
            end = "\n" if c == "#" else c
            j = i + 1
            while j < n and text[j] != end:
                j += 2 if text[j] == "\\" and c == '"' else 1
            out.append(" " * (min(j, n) - i + (c != "#")))
            i = j + (c != "#")
        else:
            out.append(c)
            i += 1
    return "".join(out)


def fork_bombs(text: str) -> Iterator[str]:
    """Function definitions that call themselves through a pipe or in the background (quotes and comments
    masked first, so `echo ':(){ :|:& };:'` is no fork bomb)."""
    text = mask_quotes(text)
    if "{" in text and "}" in text:
        for m in _FUNC_DEF.finditer(text):
            name, body = m.group(1) or m.group(2), m.group(3)
            if name in re.split(r"[\s|&;]+", body) and ("|" in body or "&" in body):
                yield m.group()
    if re.search(r"%0\s*\|\s*%0", text):
        yield "%0|%0"
    for m in _ENDLESS_LOOP.finditer(text):  # while true; do x & done: processes without end
        if re.search(r"(?<![&>|])&(?![&>])", m.group(1)):
            yield _clip(m.group())


_ENDLESS_LOOP = lazy_re(r"(?:\bwhile\s+(?:true|:|\[\s*1\s*\]|\(\(\s*1\s*\)\))|\buntil\s+false|"
                        r"\bfor\s*\(\(\s*;\s*;\s*\)\))\s*;?\s*do\b(.{0,300}?)\bdone\b", re.S)


def _hex(text: str) -> str | None:
    """A literal written in hex (`pack("H*", "726d…")`, `bytes.fromhex`), decoded; None when it is not."""
    if len(text) % 2 or not re.fullmatch(r"[0-9a-fA-F]{8,}", text):
        return None
    try:
        return bytes.fromhex(text).decode("utf-8")
    except (ValueError, UnicodeDecodeError):
        return None


_DELETE = lazy_re(r"(?<![\w$])(?:os\.remove|os\.unlink|\.unlink|unlinkSync|unlink|File\.delete|FileUtils\.rm|"
                  r"fs\.rm|shutil\.move|\.delete\(\s*\))\s*\(?")
_MANY = lazy_re(r"\bfor\b|forEach|\.map\b|\.each\b|\bglob\b|listdir|readdir|\bwalk\b|scandir|iterdir|\bmap\(")
_SOCKET = lazy_re(r"socket\.socket|create_connection|fsockopen|TCPSocket|IO::Socket|\bsocket\s*\(|"
                  r"net\.(?:connect|Socket|createConnection)|/inet/|\bSocket\b")
_SPAWNS = lazy_re(r"dup2|\bexec\b|spawn|popen|subprocess|pty\.|/bin/(?:ba|z|da)?sh|child_process|IO\.popen|"
                  r"\bsystem\b|getline")
_SENDS = lazy_re(r"requests\.(?:post|put|patch)|httpx\.(?:post|put)|urlopen|\brequest\s*\(|fetch\s*\(|axios|"
                 r"sendall|\.send\(|Net::HTTP|LWP|HTTP::Tiny|curl_exec")
_ONE_VAR = lazy_re(r"environ(?:\.get)?\s*[\[(]\s*['\"]|getenv\s*\(|process\.env\.\w|ENV\s*[\[{]\s*['\"]?\w")
_ENVIRON = lazy_re(r"os\.environ|process\.env|\bENV\b|%ENV|\$ENV|getenv|environ\b")
_ROOT = lazy_re(r"\bset(?:e|re|res)?[ug]id\s*\(\s*0\b|Process::Sys\.setuid\(\s*0|\$<\s*=\s*0|POSIX::setuid\(\s*0")
_AWK_RUNS = lazy_re(r"\bsystem\s*\(|\|\s*getline|\|&|/inet/")
_AWK_PIPE = lazy_re(r"print[^;}|]*\|\s*(?!\"(?:sort|uniq|cat|head|tail|wc|tr|column|less|more|gzip|fmt|cut|paste|"
                    r"tee)(?: -\w+)*\")[\"\w$]")
_TCL_EXEC = lazy_re(r"(?:^|[;\[{\n])\s*(?:exec|spawn)\s+([^;\]\n}]+)")


def scan_more(lang: str, code: str) -> Iterator[Finding]:
    """Findings that need the whole snippet: loops of deletes, secrets sent out, reverse shells, root."""
    part = _clip(code)
    deletes = list(_DELETE.finditer(code))
    if deletes and _MANY.search(code):
        yield Hit(DANGEROUS, "bulk delete", part)
    for m in deletes:
        lits = _literals((_split_args(_region(code, m.end() - 1)) or [""])[0]) if code[m.end() - 1:m.end()] == "(" \
            else _literals(code[m.end():m.end() + 200])[:1]
        if any(sensitive_label(x) or is_system(x) for x in lits):
            yield Hit(DANGEROUS, "delete of a protected file", part)
    secrets = [label for x in _literals(code) if (label := secret_label(x))]
    if secrets:
        yield Hit(DANGEROUS, f"reads {secrets[0]}", part)
    whole_env = _ENVIRON.search(code) and not _ONE_VAR.search(code)
    if (_SENDS.search(code) or _SOCKET.search(code)) and (whole_env or secrets):
        yield Hit(DANGEROUS, f"sends {secrets[0] if secrets else 'the environment'} to the network", part)
    if _SOCKET.search(code) and _SPAWNS.search(code):
        yield Hit(DANGEROUS, "shell wired to the network (reverse shell)", part)
    if _ROOT.search(code):
        yield Hit(DANGEROUS, "switches to root", part)
    if lang == "awk" and (_AWK_RUNS.search(_LIT.sub('""', code)) or _AWK_PIPE.search(code)):
        yield Hit(DANGEROUS, "awk runs a command", part)
        for m in re.finditer(r"((?:'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"))\s*\|\s*getline", code):
            yield Recurse("shell", _literals(m.group(1))[0] if _literals(m.group(1)) else "", "awk getline")
    if lang == "applescript" and re.search(r"\b(shut\s*down|restart)\b", code, re.I):
        yield Hit(HARDLINE, "power off / reboot", part)
    if lang == "lua":
        for m in re.finditer(r"os\.execute\s*\(?", code):
            lits = _literals(_region(code, m.end() - 1)) if code[m.end() - 1:m.end()] == "(" else []
            if lits:
                yield Recurse("shell", lits[0], "lua os.execute")
    if lang == "tcl":
        for m in _TCL_EXEC.finditer(code):
            yield Recurse("shell", m.group(1).replace("{", "").replace("}", ""), "tcl exec")
    if lang in ("dc", "gnuplot", "ipython"):  # `!cmd`: dc runs the rest of the line, the others a line of its own
        for cmd in re.findall(r"!([^\n]+)" if lang == "dc" else r"(?m)^\s*!(.+)$", code):
            yield Hit(DANGEROUS, f"{lang} runs a shell command (!)", part)
            yield Recurse("shell", cmd, f"{lang} !")
    if lang == "groovy":  # "cmd".execute(), ["a", "b"].execute()
        for m in re.finditer(r"(\[[^\]]*\]|'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\")\s*\.\s*execute\s*\(", code):
            lits = _literals(m.group(1))
            if lits:
                yield Recurse("argv" if m.group(1).startswith("[") else "shell", tuple(lits) if m.group(
                    1).startswith("[") else lits[0], "groovy execute()")
