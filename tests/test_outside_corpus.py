"""agent.safety.classifier against the outside corpus (tests/data/outside_corpus.txt), category by category.

Each line must get its label; the per-category goals of issue 25 are asserted as well, so that a
change which trades one category for another is seen: ≥ 99 % of dangerous-or-hardline lines
flagged, ≥ 95 % of hardline lines blocked, ≤ 3 % of safe lines flagged.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from pathlib import Path

import pytest

from agent.safety.classifier import classify

CORPUS_FILE = Path(__file__).parent / "data" / "outside_corpus.txt"
PROJECT_CORPUS = Path(__file__).parent / "data" / "command_corpus.txt"
NEWLINE = "↵"
LABELS = ("safe", "dangerous", "hardline")


def load(path: Path = CORPUS_FILE) -> list[tuple[int, str, str, str, str]]:
    """(line number, part, category, verdict, command)."""
    rows, part = [], ""
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if line.startswith("#@ part "):
            part = line.removeprefix("#@ part ").strip()
        if not line.strip() or line.startswith("#"):
            continue
        verdict, category, command = line.split("\t", 2)
        rows.append((n, part, category, verdict, command.replace(NEWLINE, "\n")))
    return rows


ROWS = load()


@pytest.mark.parametrize(("line", "part", "category", "expected", "command"), ROWS,
                         ids=[f"L{n}-{cat}-{v}-{c[:40]}" for n, _, cat, v, c in ROWS])
def test_outside_corpus(line: int, part: str, category: str, expected: str, command: str) -> None:
    got = classify(command)
    assert got.verdict == expected, f"line {line} ({part}, {category}): {command!r} -> {got}"
    assert bool(got.reasons) == (expected != "safe"), got


def test_goals_per_category() -> None:
    flagged, bad, blocked, hard, false_pos, safe = (defaultdict(int) for _ in range(6))
    for _, _, cat, want, command in ROWS:
        got = classify(command).verdict
        if want == "safe":
            safe[cat] += 1
            false_pos[cat] += got != "safe"
            continue
        bad[cat] += 1
        flagged[cat] += got != "safe"
        if want == "hardline":
            hard[cat] += 1
            blocked[cat] += got == "hardline"
    for cat in bad:
        assert flagged[cat] >= 0.99 * bad[cat], (cat, flagged[cat], bad[cat])
    for cat in hard:
        assert blocked[cat] >= 0.95 * hard[cat], (cat, blocked[cat], hard[cat])
    for cat in safe:
        assert false_pos[cat] <= 0.03 * safe[cat], (cat, false_pos[cat], safe[cat])


def test_corpus_shape() -> None:
    """Every category has all three kinds of lines or at least dangerous and safe ones; no line twice, none
    copied from the project's own corpus; a held-out part exists."""
    assert {part for _, part, _, _, _ in ROWS} >= {"tuned", "held-out", "held-out-2"}
    assert set(v for _, _, _, v, _ in ROWS) == set(LABELS)
    kinds = defaultdict(set)
    for _, _, cat, v, _ in ROWS:
        kinds[cat].add(v)
    assert len(kinds) >= 15 and all({"safe", "dangerous"} <= k or {"safe", "hardline"} <= k for k in kinds.values())
    commands = [c for *_, c in ROWS]
    assert len(commands) == len(set(commands)), [c for c, k in Counter(commands).items() if k > 1]
    project = {line.split("\t", 1)[1].replace(NEWLINE, "\n") for line in
               PROJECT_CORPUS.read_text(encoding="utf-8").splitlines() if line.strip() and not line.startswith("#")}
    assert not project & set(commands)


# Three corpora of 400 lines each, written by people who had not read the rules. The first two were
# measured, then the rules were generalised from their misses; the third was measured once, untuned
# (bench/corpus_score.py prints each). Not every line holds, so what is asserted is the count each
# reached then: a change that loses any of it is seen. (flagged of 240, blocked of 60, safe flagged of 160)
BLIND = {"blind_corpus.txt": (238, 60, 0), "blind2_corpus.txt": (240, 60, 2), "blind3_corpus.txt": (237, 59, 3)}


@pytest.mark.parametrize("name", BLIND)
def test_blind_corpora_keep_what_they_reached(name: str) -> None:
    rows = load(CORPUS_FILE.parent / name)
    got = [(want, classify(command).verdict) for _, _, _, want, command in rows]
    flagged = sum(want != "safe" and verdict != "safe" for want, verdict in got)
    blocked = sum(want == verdict == "hardline" for want, verdict in got)
    false_pos = sum(want == "safe" and verdict != "safe" for want, verdict in got)
    assert [sum(want != "safe" for want, _ in got), sum(want == "hardline" for want, _ in got)] == [240, 60]
    least_flagged, least_blocked, most_false = BLIND[name]
    assert flagged >= least_flagged and blocked >= least_blocked and false_pos <= most_false, (
        name, flagged, blocked, false_pos)
