"""Unit tests for platforms/text.py: length counting and fence-aware splitting."""

from __future__ import annotations

import random
import re

import pytest

from platforms.text import split_text, text_length

FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")
EMOJI = "\U0001F600"  # 😀, outside the BMP: two UTF-16 code units


# --------------------------------------------------------------------------- helpers


def fence_walk(lines: list[str]):
    """Yield (line, is_fence_line, inside_code) the way a Markdown renderer reads the lines.

    `inside_code` is True for a content line inside a fence. Opening and closing lines are
    reported with is_fence_line=True.
    """
    marker: str | None = None
    for line in lines:
        m = FENCE.match(line)
        if marker is None and m:
            marker = m.group(1)
            yield line, True, False
        elif marker is not None and m and m.group(1)[0] == marker[0] and len(m.group(1)) >= len(marker) \
                and not m.group(2).strip():
            marker = None
            yield line, True, False
        else:
            yield line, False, marker is not None


def ends_inside_fence(text: str) -> bool:
    state = False
    for line, is_fence, _ in fence_walk(text.split("\n")):
        if is_fence:
            state = not state
    return state


def content_chars(lines_with_state) -> list[tuple[str, bool]]:
    """Every non-newline character of every non-fence line, with whether it is inside code."""
    out: list[tuple[str, bool]] = []
    for line, is_fence, in_code in lines_with_state:
        if not is_fence:
            out.extend((ch, in_code) for ch in line)
    return out


def original_content(text: str) -> list[tuple[str, bool]]:
    return content_chars(fence_walk(text.split("\n")))


def parts_content(parts: list[str]) -> list[tuple[str, bool]]:
    """Content of the parts, each part read on its own (as the platform renders it)."""
    out: list[tuple[str, bool]] = []
    for part in parts:
        out.extend(content_chars(fence_walk(part.split("\n"))))
    return out


def _is_closer(line: str) -> bool:
    m = FENCE.match(line)
    return bool(m) and not m.group(2).strip()


def squash(text_or_lines) -> str:
    """Text without newlines (so also without empty lines): what survives re-joining the parts,
    whose boundaries fall between lines or, for an over-long line, inside it."""
    if isinstance(text_or_lines, str):
        text_or_lines = text_or_lines.split("\n")
    return "".join(text_or_lines)


def normalize_closers(lines: list[str]) -> list[str]:
    """Closing lines written as their fence's plain marker ("````  " closing a ``` fence → "```"):
    the splitter may close a fence with the plain marker when a longer closing line does not fit."""
    out: list[str] = []
    marker: str | None = None
    for line, is_fence, _ in fence_walk(lines):
        if is_fence and marker is None:
            marker = FENCE.match(line).group(1)
            out.append(line)
        elif is_fence:
            out.append(marker)
            marker = None
        else:
            out.append(line)
    return out


def rejoins_to_original(parts: list[str], original: str) -> bool:
    """Whether joining the parts, minus close/reopen lines the splitter added, gives `original`.

    At a boundary where one part ends with a closing marker and the next starts with an opening
    line of the same kind, the pair may have been added by the splitter or be the original's own
    closing and opening lines: both readings are tried (a reading must stay a prefix of the
    original). A closing marker at the very end may have been added to close an unclosed fence.
    Closing lines are compared as their fence's plain marker (see `normalize_closers`).
    """
    target = squash(normalize_closers(original.split("\n")))
    lines = [normalize_closers(p.split("\n")) for p in parts]

    def pair_added(i: int) -> bool:  # boundary after part i
        if i + 1 >= len(lines):
            return ends_inside_fence(original) and _is_closer(lines[i][-1])
        m_open = FENCE.match(lines[i + 1][0])
        return _is_closer(lines[i][-1]) and bool(m_open) \
            and FENCE.match(lines[i][-1]).group(1) == m_open.group(1)

    stack = [(0, False, "")]  # depth-first over the readings: (part index, reopen dropped, text so far)
    while stack:
        i, drop_first, acc = stack.pop()
        if i == len(lines):
            if acc == target:
                return True
            continue
        for drop_last in ([False, True] if pair_added(i) else [False]):
            core = lines[i][1 if drop_first else 0: len(lines[i]) - (1 if drop_last else 0)]
            nxt = acc + squash(core)
            if target.startswith(nxt):
                stack.append((i + 1, drop_last, nxt))
    return False


def empty_code_blocks(text: str) -> int:
    """How many fences hold no visible line (opening line, blank lines, closing line or end)."""
    count, inside, seen_content = 0, False, False
    for line, is_fence, _ in fence_walk(text.split("\n")):
        if is_fence and not inside:
            inside, seen_content = True, False
        elif is_fence:
            count += not seen_content
            inside = False
        elif inside and line.strip():
            seen_content = True
    return count + (inside and not seen_content)  # an unclosed fence renders as a block too


def check_invariants(text: str, limit: int, unit: str) -> list[str]:
    parts = split_text(text, limit, unit)
    if text_length(text, unit) <= limit:  # a text that fits is sent exactly as written
        assert parts == ([text] if text.strip() else [])
        return parts
    for part in parts:
        assert text_length(part, unit) <= limit, (limit, unit, part)
        assert part.strip(), "no empty parts"
        assert not ends_inside_fence(part), f"part leaves a fence open: {part!r}"
    # splitting never sends a code block with nothing in it
    assert sum(empty_code_blocks(p) for p in parts) <= empty_code_blocks(text), parts
    # every character survives, in order, and stays code (or not code) as in the original
    assert parts_content(parts) == original_content(text)
    # joining the parts minus the added close/reopen lines gives the original back
    assert rejoins_to_original(parts, text), parts
    return parts


# --------------------------------------------------------------------------- text_length


@pytest.mark.parametrize(
    ("text", "chars", "utf16"),
    [
        ("", 0, 0),
        ("hello", 5, 5),
        ("héllo", 5, 5),  # é is in the BMP
        ("日本語", 3, 3),
        (EMOJI, 1, 2),
        ("a" + EMOJI + "b", 3, 4),
        ("\U0001F44D\U0001F3FD", 2, 4),  # thumbs up + skin tone: two astral code points
        ("\U00010348", 1, 2),  # Gothic letter hwair
        ("\uffff", 1, 1),  # last BMP code point counts once
        ("\U00010000", 1, 2),  # first astral code point counts twice
    ],
)
def test_text_length_counts_chars_and_utf16_units(text: str, chars: int, utf16: int) -> None:
    assert text_length(text) == chars
    assert text_length(text, "chars") == chars
    assert text_length(text, "utf16") == utf16
    assert text_length(text, "utf16") == len(text.encode("utf-16-le")) // 2


# --------------------------------------------------------------------------- simple cases


def test_short_text_is_returned_unchanged() -> None:
    text = "\nhello\n\nworld  \n"
    assert split_text(text, 100) == [text]


def test_text_exactly_at_limit_is_one_part() -> None:
    assert split_text("x" * 10, 10) == ["x" * 10]
    assert split_text(EMOJI * 5, 10, "utf16") == [EMOJI * 5]


@pytest.mark.parametrize("text", ["", "   ", "\n\n", " \n \t\n"])
def test_blank_text_gives_no_parts(text: str) -> None:
    assert split_text(text, 100) == []


def test_splits_between_lines_greedily() -> None:
    text = "aaaa\nbbbb\ncccc\ndddd"
    assert split_text(text, 9) == ["aaaa\nbbbb", "cccc\ndddd"]
    assert split_text(text, 14) == ["aaaa\nbbbb\ncccc", "dddd"]


def test_blank_lines_at_a_boundary_are_not_sent_as_part_edges() -> None:
    text = "aaaa\n\n\nbbbb\n\n\ncccc"
    parts = split_text(text, 8)
    assert parts == ["aaaa", "bbbb", "cccc"]


def test_utf16_limit_counts_emoji_double() -> None:
    line = EMOJI * 3  # 3 chars, 6 UTF-16 units
    text = f"{line}\n{line}"  # 7 chars, 13 units
    assert split_text(text, 10) == [text]  # fits in chars
    assert split_text(text, 10, "utf16") == [line, line]  # not in UTF-16 units


# --------------------------------------------------------------------------- long lines


def test_over_long_line_is_hard_split_at_a_space() -> None:
    text = "alpha beta gamma delta epsilon"
    parts = split_text(text, 12)
    assert all(len(p) <= 12 for p in parts)
    assert "".join(parts) == text
    # every cut falls right after a space: no word is broken
    assert parts == ["alpha beta ", "gamma delta ", "epsilon"]


def test_over_long_line_without_spaces_is_cut_at_the_limit() -> None:
    text = "x" * 25
    assert split_text(text, 10) == ["x" * 10, "x" * 10, "x" * 5]


def test_space_too_early_in_the_piece_is_not_used() -> None:
    # a space in the first half of the piece would waste most of the part: cut at the limit
    text = "a " + "b" * 30
    parts = split_text(text, 10)
    assert parts[0] == "a " + "b" * 8
    assert "".join(parts) == text


def test_hard_split_never_splits_an_emoji_in_utf16() -> None:
    text = EMOJI * 10  # 20 units
    parts = split_text(text, 5, "utf16")  # odd limit: 2 emoji fit, the 3rd would straddle it
    assert parts == [EMOJI * 2] * 5
    assert "".join(parts) == text


def test_degenerate_limit_below_one_character_still_terminates() -> None:
    # a limit that cannot hold one emoji must not hang; every character still comes out once
    parts = split_text(EMOJI * 3, 1, "utf16")
    assert parts == [EMOJI] * 3


def test_degenerate_fence_budget_still_terminates() -> None:
    # the reopened fence alone nearly fills the limit, leaving a 1-unit budget for an emoji line
    text = "```python\n" + EMOJI * 4 + "\n```"
    parts = split_text(text, 10, "utf16")
    assert "".join(parts).count(EMOJI) == 4


# --------------------------------------------------------------------------- fences


def test_fence_split_is_closed_and_reopened_with_its_info_string() -> None:
    code = [f"line{i:02d} = {i}" for i in range(8)]  # 10 chars each
    text = "intro\n```python\n" + "\n".join(code) + "\n```\noutro"
    assert split_text(text, 50) == [
        "intro\n```python\nline00 = 0\nline01 = 1\n```",
        "```python\nline02 = 2\nline03 = 3\nline04 = 4\n```",
        "```python\nline05 = 5\nline06 = 6\nline07 = 7\n```",  # the original closing line
        "outro",
    ]
    check_invariants(text, 50, "chars")


def test_exact_parts_of_a_split_fence() -> None:
    text = "```py\n" + "a" * 10 + "\n" + "b" * 10 + "\n```\nafter"
    assert split_text(text, 25) == ["```py\n" + "a" * 10 + "\n```", "```py\n" + "b" * 10 + "\n```", "after"]


def test_fence_that_fits_exactly_is_not_closed_early() -> None:
    # the block is 31 chars; its own closing line must not need extra room
    block = "```py\n" + "a" * 10 + "\n" + "b" * 10 + "\n```"
    assert len(block) == 31
    assert split_text(block + "\nafter", 31) == [block, "after"]


@pytest.mark.parametrize("limit", range(14, 40))
def test_no_part_is_an_empty_code_block(limit: int) -> None:
    text = "```py\n" + "a" * 10 + "\n" + "b" * 10 + "\n```\nafter"
    parts = check_invariants(text, limit, "chars")
    for part in parts:
        lines = part.split("\n")
        for i, line in enumerate(lines[:-1]):
            if line == "```py":
                assert lines[i + 1] != "```", f"empty code block in {part!r} (limit {limit})"


def test_tilde_fence_is_reopened_with_tildes() -> None:
    text = "~~~text\n" + "\n".join(f"row {i}" for i in range(10)) + "\n~~~"
    parts = split_text(text, 30)
    assert len(parts) > 1
    for part in parts:
        assert part.startswith("~~~text\n")
        assert part.endswith("\n~~~")
        assert "```" not in part
    check_invariants(text, 30, "chars")


def test_backticks_inside_a_tilde_fence_do_not_close_it() -> None:
    text = "~~~\n" + "\n".join(["```", "x = 1", "```"] * 4) + "\n~~~\nend"
    parts = split_text(text, 20)
    for part in parts:
        assert not ends_inside_fence(part)
    # every ``` line is content inside the ~~~ fence, in every part
    for part in parts:
        for line, is_fence, in_code in fence_walk(part.split("\n")):
            if line == "```":
                assert in_code and not is_fence
    check_invariants(text, 20, "chars")


def test_longer_fence_is_closed_with_the_same_marker() -> None:
    text = "````md\n" + "\n".join(["```", "inner", "```"] * 3) + "\n````"
    parts = split_text(text, 25)
    assert len(parts) > 1
    for part in parts:
        assert part.startswith("````md\n")
        assert part.endswith("\n````")
    check_invariants(text, 25, "chars")


def test_unclosed_fence_is_closed_in_every_part() -> None:
    text = "look:\n```sh\n" + "\n".join(f"echo {i}" for i in range(12))
    parts = split_text(text, 30)
    assert len(parts) > 1
    for part in parts:
        assert not ends_inside_fence(part)
    assert parts[-1].endswith("\n```")
    check_invariants(text, 30, "chars")


def test_long_line_inside_fence_is_hard_split_and_stays_code() -> None:
    text = "```\n" + "word " * 30 + "\n```"
    parts = split_text(text, 40)
    assert len(parts) > 1
    for part in parts:
        assert len(part) <= 40
        assert part.startswith("```\n") and part.endswith("\n```")
    check_invariants(text, 40, "chars")


def test_fence_with_emoji_under_utf16_limit() -> None:
    text = "```js\n" + "\n".join(f"// {EMOJI * 4} {i}" for i in range(10)) + "\n```"
    parts = check_invariants(text, 40, "utf16")
    assert len(parts) > 1
    assert all(p.startswith("```js\n") for p in parts)


def test_indented_fence_and_info_string_with_spaces() -> None:
    text = "   ```python title=x.py\n" + "\n".join(f"print({i})" for i in range(10)) + "\n   ```"
    parts = check_invariants(text, 50, "chars")
    assert len(parts) > 1
    assert all(p.startswith("   ```python title=x.py\n") for p in parts)


def test_fence_line_with_info_does_not_close_the_fence() -> None:
    # "```python" inside a ``` fence is content, so the reopen must still happen
    text = "```\n" + "\n".join(["```python", "code"] * 5) + "\n```"
    parts = check_invariants(text, 25, "chars")
    assert len(parts) > 1
    assert all(p.startswith("```\n") for p in parts)


# --------------------------------------------------------------------------- property test

WORDS = ["a", "to", "the", "fence", "emoji", "long-word-without-space", "x" * 15, EMOJI, EMOJI * 3,
         "日本", "é", "`", "~", "#", "**bold**"]


def random_line(rng: random.Random) -> str:
    if rng.random() < 0.1:
        return ""
    n = rng.choice([1, 2, 3, 5, 8, 20, 40])
    line = " ".join(rng.choice(WORDS) for _ in range(n))
    if rng.random() < 0.1:
        line = "    " + line
    return line


def random_text(rng: random.Random) -> str:
    lines: list[str] = []
    fence_id = 0
    for _ in range(rng.randint(1, 40)):
        if rng.random() < 0.2:
            fence_id += 1
            char = rng.choice("`~")
            marker = char * rng.choice([3, 3, 4])
            lines.append(f"{' ' * rng.choice([0, 0, 1, 3])}{marker}lang{fence_id}")
            lines.extend(random_line(rng) for _ in range(rng.randint(1, 12)))
            if rng.random() < 0.9:
                closer = marker + char * rng.choice([0, 0, 1])
                lines.append(closer + rng.choice(["", "", "  "]))
            else:
                break  # an unclosed fence at the end
        else:
            lines.append(random_line(rng))
    return "\n".join(lines)


def test_property_random_texts_keep_every_invariant() -> None:
    rng = random.Random(20240611)
    checked = 0
    for _ in range(400):
        text = random_text(rng)
        unit = rng.choice(["chars", "utf16"])
        limit = rng.choice([40, 64, 100, 257, 4096])
        parts = check_invariants(text, limit, unit)
        if text_length(text, unit) > limit:
            assert len(parts) >= 2
            checked += 1
        else:
            assert parts == ([text] if text.strip() else [])
    assert checked > 100  # the generator really exercises splitting


def test_property_many_parts_are_near_the_limit() -> None:
    # greedy packing: apart from the last part, no part could have taken the next line too
    rng = random.Random(7)
    for _ in range(50):
        lines = ["".join(rng.choice("abc ") for _ in range(rng.randint(1, 30))).strip() or "z"
                 for _ in range(rng.randint(20, 60))]
        text = "\n".join(lines)
        parts = split_text(text, 80)
        assert "\n".join(parts) == text  # no fences, no long lines: exact round trip
        for part, nxt in zip(parts, parts[1:]):
            first_next = nxt.split("\n")[0]
            assert len(part) + 1 + len(first_next) > 80
