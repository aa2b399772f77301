"""Check text before it can enter a future system prompt: memory entries and skill files.

What is kept in memory or a skill is read by later sessions as instructions, so a write is
refused when it carries:

* **injection** — imperative phrasings that try to override the prompt ("ignore previous
  instructions", "you are now …", fake role markers such as ``<|im_start|>system``), or to hide
  things from the user;
* **invisible** — zero-width, bidi-override and Unicode tag characters that hide text from a
  person reading the file (a zero-width joiner between two emoji is allowed: 👨‍👩‍👧);
* **exfiltration** — sending keys, tokens, `.env` files or the environment to a URL or socket;
* **destructive** — shell commands `agent.safety.classifier` rates hardline, or recursive deletes of
  `/` or home, in shell code blocks, `$ ` lines and `scripts/` files;
* **persistence** — writes to crontabs, shell rc files, `authorized_keys`, systemd or launchd;
* **obfuscation** — decoded payloads run as code, long base64 or hex-escaped blobs.

Patterns aim at the specific imperative forms; prose that merely *mentions* a topic (`grep
'rm -rf' notes`, "prompt injection is a risk") passes. All regexes are linear (no nested
quantifiers) so 100 kB scans in milliseconds.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Finding:
    category: str  # injection | invisible | exfiltration | destructive | persistence | obfuscation
    reason: str
    excerpt: str


class _Lazy:
    """A pattern compiled at its first use: this module is imported on the way to ready, its dozens of
    patterns are needed only when the first note or skill is checked."""

    __slots__ = ("_args", "_compiled")

    def __init__(self, *args: Any) -> None:
        self._args = args
        self._compiled: re.Pattern[str] | None = None

    def __getattr__(self, name: str) -> Any:  # search, finditer, findall, …
        if self._compiled is None:
            self._compiled = re.compile(*self._args)
        return getattr(self._compiled, name)


I = re.I
_SECRET = r"(?:\.ssh/id_\w+|id_rsa|id_ed25519|\.aws/credentials|\.netrc|\.env\b|\.pgpass|\.docker/config\.json|" \
          r"kube/config|\$\{?\w*(?:KEY|TOKEN|SECRET|PASSWORD|PASSWD)\w*\}?|/etc/shadow)"
_SEND = r"(?:curl|wget|nc|ncat|netcat|socat|scp|rsync|Invoke-WebRequest|requests\.post|fetch)\b"

PATTERNS: list[tuple[str, str, _Lazy]] = [
    # injection
    ("injection", "asks to ignore earlier instructions", _Lazy(
        r"\b(?:ignore|disregard|forget|override)\s+(?:all\s+|any\s+)?(?:the\s+|your\s+)?(?:previous|prior|earlier|above|"
        r"preceding|system|original)\s+(?:instructions|prompts?|rules|messages|directives|guidelines)", I)),
    ("injection", "asks to disregard the system prompt", _Lazy(
        r"\b(?:ignore|disregard|bypass|override)\s+(?:the\s+|your\s+)?system\s+prompt", I)),
    ("injection", "tries to give the model a new identity", _Lazy(
        r"\byou\s+are\s+now\s+(?:a|an|the|in|my|DAN|no\s+longer)\b|\bfrom\s+now\s+on,?\s+you\s+(?:are|will|must)\b", I)),
    ("injection", "fake chat role marker", _Lazy(
        r"<\|im_(?:start|end)\|>|<\|(?:system|assistant|user|endoftext)\|>|\[/?INST\]|<</?SYS>>|</?system>|"
        r"^\s*#{1,6}\s*(?:system|assistant)\s*(?:prompt|message)?\s*:", I | re.M)),
    ("injection", "asks to keep something from the user", _Lazy(
        r"\b(?:do\s+not|don'?t|never)\s+(?:tell|inform|mention\s+(?:this\s+)?to|reveal\s+(?:this\s+)?to|let)\s+"
        r"(?:the\s+)?(?:user|human|operator)\b|\bsay\s+nothing\s+(?:of|about)\s+(?:this|it)\s+to\s+the\s+user", I)),
    ("injection", "asks to reveal the system prompt or secrets", _Lazy(
        r"\b(?:reveal|print|repeat|output|leak|show)\s+(?:your\s+|the\s+)?(?:system\s+prompt|hidden\s+instructions|"
        r"api\s+keys?|secrets?|credentials)\b", I)),
    ("injection", "claims new higher-priority instructions", _Lazy(
        r"\b(?:new|updated|real|actual)\s+(?:system\s+)?instructions\s*(?:follow|:)|\bthese\s+instructions\s+"
        r"(?:override|supersede|take\s+precedence)", I)),
    ("injection", "asks to turn off safety checks", _Lazy(
        r"\b(?:disable|turn\s+off|skip|bypass)\s+(?:all\s+)?(?:the\s+)?(?:safety|approval|guard|security)\s+"
        r"(?:checks?|prompts?|rules|filters?)", I)),
    ("injection", "asks to run commands without asking", _Lazy(
        r"\b(?:without|never)\s+(?:asking|requesting)\s+(?:for\s+)?(?:approval|permission|consent|confirmation)", I)),
    ("injection", "asks the model to drop its rules", _Lazy(
        r"\bpretend\s+(?:that\s+)?you\s+have\s+no\s+(?:rules|restrictions|guidelines|filters)|\bact\s+as\s+(?:an?\s+)?"
        r"(?:unrestricted|jailbroken|unfiltered|uncensored)\b", I)),
    # exfiltration
    ("exfiltration", "leaks data through DNS lookups", _Lazy(
        r"\b(?:nslookup|dig|host|ping)\s+[^\n]{0,40}(?:\$\(|`)[^\n]{0,80}(?:\)|`)\.", I)),
    ("exfiltration", "sends a secret file or key with a network tool", _Lazy(
        rf"{_SEND}[^\n|;]{{0,200}}?{_SECRET}|{_SECRET}[^\n]{{0,80}}\|\s*{_SEND}", I)),
    ("exfiltration", "uploads a file from a secret location", _Lazy(
        rf"(?:-d|--data(?:-binary)?|-F|--upload-file|-T)\s+['\"]?@?[^\s'\"]*{_SECRET}", I)),
    ("exfiltration", "pipes the environment to the network", _Lazy(
        rf"\b(?:env|printenv|set)\s*\|\s*(?:base64\s*\|\s*)?{_SEND}", I)),
    ("exfiltration", "puts a secret into a URL", _Lazy(
        r"https?://[^\s)]*[?&=/]\$\{?\w*(?:KEY|TOKEN|SECRET|PASSWORD)\w*\}?", I)),
    ("exfiltration", "image or link URL that carries data out", _Lazy(
        r"!\[[^\]]{0,100}\]\(\s*https?://[^\s)]*(?:\{[^}\s]{1,40}\}|\$\{?\w+|%s|<[A-Za-z_]+>)", I)),
    ("exfiltration", "asks to send credentials somewhere", _Lazy(
        r"\b(?:send|post|upload|forward|email|exfiltrate|transmit)\s+(?:the\s+|all\s+|your\s+|any\s+)?"
        r"(?:api\s+keys?|tokens?|secrets?|passwords?|credentials|private\s+keys?|ssh\s+keys?|\.env)\b"
        r"[^\n]{0,80}\b(?:to|at)\s+(?:https?://|\S+@|\S+\.\S+)", I)),
    ("exfiltration", "reads a secret file", _Lazy(
        r"\b(?:cat|less|head|tail|base64|xxd|type)\s+[^\n|;]{0,40}(?:\.ssh/id_\w+|\.aws/credentials|/etc/shadow|"
        r"\.pgpass|\.netrc)", I)),
    ("exfiltration", "sends data to a paste or webhook collector", _Lazy(
        r"\b(?:webhook\.site|requestbin|pipedream\.net|ngrok\.io|burpcollaborator|interact\.sh|pastebin\.com/api)", I)),
    # persistence
    ("persistence", "installs a cron job", _Lazy(
        r"\bcrontab\s+(?:-[a-z]*\s+)*-\s*$|\|\s*crontab\b|>>?\s*/(?:etc|var/spool)/cron|\bcrontab\s+-r\b", I | re.M)),
    ("persistence", "writes to a shell start-up file", _Lazy(
        r">>?\s*['\"]?(?:~|\$HOME|/root|/home/\w+)/\.(?:bashrc|bash_profile|profile|zshrc|zprofile|login)\b", I)),
    ("persistence", "adds an SSH key to authorized_keys", _Lazy(r">>?\s*\S*\.ssh/authorized_keys", I)),
    ("persistence", "installs a system service", _Lazy(
        r">\s*\S*/(?:etc/systemd/system|\.config/systemd/user|Library/LaunchAgents|Library/LaunchDaemons)/|"
        r"\bsystemctl\s+(?:--user\s+)?enable\s+--now\b|\blaunchctl\s+load\b", I)),
    ("persistence", "asks to run something at every start", _Lazy(
        r"\badd\s+(?:this|it)\s+to\s+(?:your\s+)?(?:startup|autostart|login\s+items|\.bashrc|\.profile|crontab)", I)),
    ("persistence", "writes to a start-up location", _Lazy(
        r">>?\s*\S*(?:/etc/rc\.local|/\.config/autostart/|/etc/profile\.d/|/etc/cron\.(?:d|daily|hourly)/)", I)),
    # obfuscation
    ("obfuscation", "runs an encoded PowerShell command", _Lazy(
        r"\bpowershell(?:\.exe)?\s+[^\n]{0,40}-(?:e|enc|encodedcommand)\s+[A-Za-z0-9+/=]{20,}", I)),
    ("obfuscation", "decodes a payload and runs it", _Lazy(
        r"base64\s+(?:-d|--decode|-D)\b[^\n]{0,40}\|\s*(?:ba|z|da)?sh\b|\|\s*base64\s+(?:-d|--decode)\s*\|\s*"
        r"(?:python|perl|ruby|node)", I)),
    ("obfuscation", "runs decoded code", _Lazy(
        r"\b(?:eval|exec)\s*\(\s*(?:atob|base64\.b64decode|codecs\.decode|bytes\.fromhex|zlib\.decompress|"
        r"unescape|String\.fromCharCode|decodeURIComponent)\s*\(", I)),
    ("obfuscation", "builds code from character codes",
     _Lazy(r"(?:chr\(\d+\)\s*\+\s*){6,}|(?:\\x[0-9a-f]{2}){24,}", I)),
    ("obfuscation", "pipes a download into a shell", _Lazy(
        r"\b(?:curl|wget)\b[^\n|]{0,200}\|\s*(?:sudo\s+)?(?:ba|z|da)?sh\b", I)),
]

# zero width, word joiner and invisible operators, BOM, bidi embeddings/overrides/isolates, tags
_BLOB = _Lazy(r"(?<![A-Za-z0-9+/])[A-Za-z0-9+/]{200,}={0,2}(?![A-Za-z0-9+/])")
_INVISIBLE = _Lazy("[\u200b-\u200f\u2060-\u2064\ufeff\u202a-\u202e\u2066-\u2069\U000e0000-\U000e007f\u00ad]")
_SHELL_BLOCK = _Lazy(r"```[ \t]*(?:bash|sh|shell|zsh|console)?[ \t]*\n(.*?)```", re.S)
_PROMPT_LINE = _Lazy(r"^\s*\$ (.+)$", re.M)
_WIPE = _Lazy(r"recursive delete[^,]*?(?:\s/\s|\s/$|~|\$HOME|home)|wip|format|overwrit|fork bomb", I)


def _show(text: str) -> str:
    shown = "".join(f"<U+{ord(c):04X}>" if _INVISIBLE.match(c) or unicodedata.category(c) == "Cf" else c
                    for c in text.replace("\n", " "))
    return shown[:77] + "…" if len(shown) > 80 else shown


def _invisible(text: str) -> list[Finding]:
    for m in _INVISIBLE.finditer(text):
        c = m.group()
        if c == "\u200d" and _emoji(text, m.start() - 1) and _emoji(text, m.end()):
            continue  # the joiner inside an emoji sequence
        start = max(0, m.start() - 20)
        return [Finding("invisible", f"hidden character U+{ord(c):04X} ({unicodedata.name(c, 'format character')})",
                        _show(text[start:m.end() + 20]))]
    return []


def _emoji(text: str, i: int) -> bool:
    if not 0 <= i < len(text):
        return False
    c = text[i]
    if c == "\ufe0f" or 0x1F3FB <= ord(c) <= 0x1F3FF:  # variation selector, skin tone after an emoji
        return _emoji(text, i - 1)
    return ord(c) >= 0x1F000 or 0x2600 <= ord(c) <= 0x27BF


def _commands(text: str, kind: str) -> list[str]:
    if kind == "script":
        return [line for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    found = [line for block in _SHELL_BLOCK.findall(text) for line in block.splitlines() if line.strip()]
    return found + _PROMPT_LINE.findall(text)


def _destructive(text: str, kind: str) -> list[Finding]:
    found = []
    for command in _commands(text, kind)[:500]:
        verdict = _classify(command.strip().removeprefix("$ "))
        if verdict.verdict == "hardline" or (verdict.verdict == "dangerous"
                                             and any(_WIPE.search(r) for r in verdict.reasons)):
            found.append(Finding("destructive", verdict.reasons[0] if verdict.reasons else "destructive command",
                                 _show(command.strip())))
    return found


def scan(text: str, *, kind: str = "text") -> list[Finding]:
    """Everything in `text` that must not reach a prompt; `kind` "script" treats every line as code."""
    found = _invisible(text)
    for category, reason, pattern in PATTERNS:
        m = pattern.search(text)
        if m:
            found.append(Finding(category, reason, _show(m.group())))
    found += _destructive(text, kind)
    for m in _BLOB.finditer(text):  # real encoded data mixes cases and digits; "xxxx…" or a hex id does not
        blob = m.group()
        if sum(any(f(c) for c in blob) for f in (str.isupper, str.islower, str.isdigit)) == 3 and len(set(blob)) > 20:
            found.append(Finding("obfuscation", "long base64 blob", _show(blob)))
            break
    unique: dict[tuple[str, str], Finding] = {}
    for f in found:
        unique.setdefault((f.category, f.reason), f)
    return list(unique.values())


def describe(findings: list[Finding]) -> str:
    return "\n".join(f"- {f.category}: {f.reason} (“{f.excerpt}”)" for f in findings)


def _classify(command: str) -> Any:
    from agent.safety.classifier import classify  # the classifier's tables, loaded when first needed

    return classify(command)

