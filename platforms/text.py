"""Splitting long replies into platform-sized parts without breaking code fences."""

from __future__ import annotations

import re

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")


def text_length(text: str, unit: str = "chars") -> int:
    """Length as the platform counts it: Python characters or UTF-16 code units."""
    if unit == "utf16":
        return len(text) + sum(1 for ch in text if ord(ch) > 0xFFFF)
    return len(text)


def _hard_split(line: str, budget: int, unit: str) -> list[str]:
    """Cut one over-long line into pieces of at most `budget` units, preferring spaces."""
    pieces: list[str] = []
    while text_length(line, unit) > budget:
        cut, used = 0, 0
        for i, ch in enumerate(line):
            used += 2 if unit == "utf16" and ord(ch) > 0xFFFF else 1
            if used > budget:
                break
            cut = i + 1
        cut = max(cut, 1)  # always make progress, even when one character exceeds the budget
        space = line.rfind(" ", 0, cut)
        if space > cut // 2:
            cut = space + 1
        pieces.append(line[:cut])
        line = line[cut:]
    pieces.append(line)
    return pieces


class _Splitter:
    """Greedy line packer that tracks whether it is inside a code fence."""

    def __init__(self, limit: int, unit: str) -> None:
        self.limit, self.unit = limit, unit
        self.parts: list[str] = []
        self.lines: list[str] = []
        self.used = 0
        self.fence: tuple[str, str] | None = None  # (closing marker, opening line) inside a fence
        self.open_at = 0  # index in `lines` of the current fence's opening line
        self.reopened = False  # `lines` starts with a fence reopened from the previous part

    def size(self, text: str) -> int:
        return text_length(text, self.unit)

    def has_content(self) -> bool:
        return bool(self.lines) and not (self.reopened and len(self.lines) == 1)

    def flush(self, final: bool = False) -> None:
        moved = False  # the fence's opening line goes to the next part instead
        if self.has_content():
            body = self.lines + ([self.fence[0]] if self.fence else [])
            if self.fence and not final and not any(x.strip() for x in self.lines[self.open_at + 1:]):
                body, moved = self.lines[:self.open_at], True  # nothing in the fence yet
            chunk = "\n".join(body).strip("\n")
            if chunk.strip():
                self.parts.append(chunk)
        self.lines = [self.fence[1]] if self.fence else []
        self.used = self.size(self.fence[1]) if self.fence else 0
        self.open_at = 0
        self.reopened = self.fence is not None and not moved

    def add(self, line: str) -> None:
        match = _FENCE.match(line)
        fence_after = self.fence
        if match and self.fence is None:
            fence_after = (match.group(1), line)
        elif match and self.fence and match.group(1)[0] == self.fence[0][0] \
                and len(match.group(1)) >= len(self.fence[0]) and not match.group(2).strip():
            fence_after = None
        if self.fence and fence_after is None and self.reopened and len(self.lines) == 1:
            # nothing since the fence was reopened: the previous part already closed it
            self.lines, self.used, self.fence, self.reopened = [], 0, None, False
            return
        if self.fence and fence_after is None and self.used + 1 + self.size(line) > self.limit:
            line = self.fence[0]  # a long closing line that does not fit: the plain marker does
        # room kept free for a closing marker whenever this part may end inside a fence (a line
        # that closes the fence is its own closing marker: it needs no extra room)
        reserve = self.size(fence_after[0]) + 1 if fence_after else 0
        reopen = self.size(self.fence[1]) + 1 if self.fence else 0
        budget = max(self.limit - reserve - reopen, 1)
        pieces = _hard_split(line, budget, self.unit) if self.size(line) > budget else [line]
        for k, piece in enumerate(pieces):
            if self.used + (1 if self.lines else 0) + self.size(piece) + reserve > self.limit and self.has_content():
                self.flush()
            if self.reopened and len(self.lines) == 1 and not piece.strip():
                continue  # no blank lines at the top of a reopened fence: they may end up alone
            if k == 0 and self.fence is None and fence_after is not None:
                self.open_at = len(self.lines)
            self.used += (1 if self.lines else 0) + self.size(piece)
            self.lines.append(piece)
        self.fence = fence_after


def split_text(text: str, limit: int, unit: str = "chars") -> list[str]:
    """Split `text` into parts of at most `limit` units (``"chars"`` or ``"utf16"``).

    Parts break between lines where possible; a code fence that must be split is closed at
    the end of one part and reopened (with its info string) at the start of the next.
    """
    if text_length(text, unit) <= limit:
        return [text] if text.strip() else []
    splitter = _Splitter(limit, unit)
    for line in text.split("\n"):
        splitter.add(line)
    splitter.flush(final=True)
    return splitter.parts
