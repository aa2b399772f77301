"""What the board takes from a person, the model or the operator — task numbers, titles, texts — and the checks
every way in (`/task`, the `board` tool, `chatgate board`) applies alike. Imports nothing: the command line's
parser uses it too."""

from __future__ import annotations

MAX_TITLE = 200
MAX_BODY = 8000  # a description, a comment, an answer, a question (each goes into a run's prompt or a chat)
ID_LIMIT = 2**63 - 1  # (the tables' ids are 64-bit on both engines: a larger number is no task)


class BoardError(ValueError):
    """A change the board refuses (no such task, a parent that cannot be waited for, text past its limits);
    its text says why."""


def task_number(text: object) -> int | None:
    """A task's number as a person or the model wrote it (`3`, `#3`); None: it is none — not ASCII digits
    (`"²".isdigit()` holds, int() refuses it), or past the tables' 64-bit ids (the database refuses it)."""
    digits = str(text).strip().removeprefix("#")
    if not (digits.isascii() and digits.isdigit()) or len(digits) > len(str(ID_LIMIT)):
        return None
    number = int(digits)
    return number if 0 < number <= ID_LIMIT else None


def one_line(text: object, limit: int | None = None) -> str:
    """Text as one line of printable characters (no escape sequence, bidi override or bell: they reach logs,
    terminals and other people's chats as they are), cut at `limit` with "…"."""
    line = " ".join("".join(c if c.isprintable() else " " for c in str(text)).split())
    return line if limit is None or len(line) <= limit else line[:limit - 1] + "…"


def checked_task(title: str, body: str) -> tuple[str, str]:
    """A new task's title (one line) and description, within their limits (BoardError else)."""
    title = one_line(title)
    if not title:
        raise BoardError("a task needs a title")
    if len(title) > MAX_TITLE or len(body) > MAX_BODY:
        raise BoardError(f"keep a title under {MAX_TITLE} characters and a description under {MAX_BODY}")
    return title, body.strip()


def checked_text(text: str, what: str) -> str:
    """A comment's, an answer's or a question's text: not empty, within `MAX_BODY` (BoardError else)."""
    if not text.strip():
        raise BoardError(f"an empty {what} says nothing: give its text")
    if len(text) > MAX_BODY:
        raise BoardError(f"keep the text under {MAX_BODY} characters")
    return text.strip()
