"""What the decoding filters of a pipeline print: `base64 -d`, `xxd -r -p`, `rev`, `tr`, `gunzip`, ...

The analysis (`verdict`) follows literal text through a pipeline; when it reaches one of these
filters the output is computed here (bounded, never raising), so `echo cm0g.. | base64 -d | sh`
is judged by what it decodes to. Also: backslash escapes as `$'..'`, `echo -e` and `printf` read them.
"""

from __future__ import annotations

import base64
import binascii
import bz2
import lzma
import re
import zlib

from agent.safety.classifier.lazy import lazy_re
from agent.safety.classifier.vocabulary import parse

DECOMPRESS_LIMIT = 1_000_000  # bytes a decompressor may produce: no decompression bombs
MAX_PRINTED = 1_000_000  # characters of printf output read (its format used again for every argument)
DECODERS = frozenset("base64 base32 basenc gbase64 openssl xxd rev tr gunzip zcat gzip bunzip2 bzip2 bzcat xz xzcat "
                     "unxz".split())
_ANSI = {"a": "\a", "b": "\b", "e": "\x1b", "E": "\x1b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v",
         "\\": "\\", "'": "'", '"': '"', "?": "?"}
_ESCAPE = lazy_re(r"\\(x[0-9a-fA-F]{1,2}|u[0-9a-fA-F]{1,4}|U[0-9a-fA-F]{1,8}|0?[0-7]{1,3}|c.|.)", re.S)


def unescape(s: str) -> str:
    """Backslash escapes as in $'..', echo -e and printf."""
    def one(m: re.Match) -> str:
        e = m.group(1)
        if e[0] in "xuU" and len(e) > 1:
            return chr(min(int(e[1:], 16), 0x10FFFF))
        if e[0] in "01234567":
            return chr(int(e, 8) & 0xFF)
        if e[0] == "c" and len(e) > 1:
            return chr(ord(e[1]) & 31)
        return _ANSI.get(e, "\\" + e)
    return _ESCAPE.sub(one, s)


def _b2s(b: bytes) -> str:
    try:
        return b.decode("utf-8")
    except UnicodeDecodeError:
        return b.decode("latin-1")


def _s2b(s: str) -> bytes:
    try:
        return s.encode("latin-1")
    except UnicodeEncodeError:
        return s.encode("utf-8", "replace")


def b64(text: str) -> str | None:
    t = re.sub(r"\s+", "", text)
    for fn in (base64.b64decode, base64.urlsafe_b64decode):
        try:
            return _b2s(fn(t + "=" * (-len(t) % 4)))
        except (binascii.Error, ValueError):
            continue
    return None


def _tr_set(spec: str) -> str:
    """A tr(1) character set with ranges (a-z) expanded; huge ranges are left alone."""
    return re.sub(r"(.)-(.)", lambda m: "".join(map(chr, range(ord(m.group(1)), ord(m.group(2)) + 1)))
                  if 0 <= ord(m.group(2)) - ord(m.group(1)) < 512 else m.group(), unescape(spec))


def decode(name: str, args: list[str], text: str) -> str | None:
    """Output of a decoding filter, when it can be computed; raises nothing."""
    try:
        o = parse(args)
        if name in ("base64", "gbase64", "basenc") and o.has("d", "D", "decode"):
            return b64(text) if name != "basenc" or o.has("base64") else None
        if name == "base32" and o.has("d", "decode"):
            return _b2s(base64.b32decode(re.sub(r"\s+", "", text)))
        if name == "openssl" and ("base64" in args or "-a" in args or "-base64" in args) and "-d" in args:
            return b64(text)
        if name == "xxd" and "-r" in args:
            return _b2s(bytes.fromhex(re.sub(r"\s+", "", text))) if any(a.startswith("-p") for a in args) else None
        if name == "rev":
            return "\n".join(line[::-1] for line in text.split("\n"))
        if name == "tr" and len(o.pos) == 2 and not o.flags:
            a, b = _tr_set(o.pos[0]), _tr_set(o.pos[1])
            b = (b + b[-1:] * len(a))[:len(a)]
            return text.translate(str.maketrans(a, b)) if a else None
        for names, make in ((("gunzip", "zcat", "gzip"), lambda: zlib.decompressobj(47)),
                            (("bunzip2", "bzip2", "bzcat"), bz2.BZ2Decompressor), (("xz", "xzcat", "unxz"), lzma.LZMADecompressor)):
            if name in names and (name not in ("gzip", "bzip2", "xz") or o.has("d", "decompress")):
                out = make().decompress(_s2b(text), DECOMPRESS_LIMIT)  # bounded: no decompression bombs
                return _b2s(out) if len(out) < DECOMPRESS_LIMIT else None
    except Exception:
        return None
    return None


def decoding(name: str, args: list[str]) -> bool:
    """Whether a DECODERS command is decoding (not encoding) here."""
    if name in ("rev", "tr", "gunzip", "zcat", "bunzip2", "bzcat", "xzcat", "unxz"):
        return True
    if name == "xxd":
        return "-r" in args or "-revert" in args
    if name == "openssl":
        return "-d" in args and any(a in ("base64", "-a", "-base64", "enc") for a in args)
    return parse(args).has("d", "D", "decode", "decompress")


_DIRECTIVE = lazy_re(r"%([-+ #0]*)(\*|[0-9]*)(\.(?:\*|[0-9]*))?(.?)", re.S)
_INTEGER = lazy_re(r"[-+]?[0-9]+")


def printf(args: list[str]) -> str | None:
    """What `printf FORMAT ARGS…` prints. Like bash, the format is used again until every argument is taken
    (`printf '%s\\n' true … 'rm -rf ~' | sh` runs the last one too); None — not known — past `MAX_PRINTED`
    characters, or when the format has a directive whose output is not the argument as it is (`%c` prints its
    first character, `%.2s` two, `%*s` takes a width from the arguments, `%x` a number in hex): a pipe it feeds
    is then judged as one the check cannot read, never as the text it did not compute. Escapes in the format
    are read as text (bash prints `\\x25s` as `%s`, not as a directive)."""
    if not args:
        return ""
    fmt, rest, out, size = args[0], list(args[1:]), [], 0
    while True:
        before = len(rest)
        printed = _printed_once(fmt, rest)
        if printed is None:
            return None
        out.append(printed)
        size += len(printed)
        if size > MAX_PRINTED:
            return None
        if not rest or len(rest) == before:  # (a format that takes no argument is printed once)
            return "".join(out)


def _printed_once(fmt: str, rest: list[str]) -> str | None:
    """One pass of the format, taking arguments from `rest`; None when a directive's output is not known."""
    out, at = [], 0
    for m in _DIRECTIVE.finditer(fmt):
        out.append(unescape(fmt[at:m.start()]))
        at = m.end()
        flags, width, precision, conversion = m.groups()
        if conversion == "%" and not (flags or width or precision):
            out.append("%")
            continue
        if "*" in width or precision or conversion not in ("s", "b", "d", "i"):
            return None
        arg = rest.pop(0) if rest else ""
        if conversion in ("d", "i"):
            if arg and not _INTEGER.fullmatch(arg):
                return None  # ('r is the character's code, 0x1f a number in hex, ...)
            out.append(f"%{flags}{width}d" % int(arg or "0"))
            continue
        elif conversion == "b":
            arg = unescape(arg)
        out.append(arg.ljust(int(width)) if "-" in flags and width else arg.rjust(int(width or 0)))
    out.append(unescape(fmt[at:]))
    return "".join(out)
