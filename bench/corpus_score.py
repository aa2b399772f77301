"""Score `agent.safety.classifier.classify` on a labelled corpus, per category. Prints; asserts nothing.

    .venv/bin/python bench/corpus_score.py tests/data/outside_corpus.txt [--misses] [--time 5]
    .venv/bin/python bench/corpus_score.py FILE --root /tmp/other-checkout   # score another checkout's code

A corpus line is `verdict<TAB>command` or `verdict<TAB>category<TAB>command` (↵ stands for a newline);
`#` starts a comment, and a line `#@ part NAME` starts a part (e.g. "tuned", "held-out") scored on its own.
Figures, for each part and category:

* flagged: dangerous-or-hardline lines not called safe (goal ≥ 99 %);
* blocked: hardline lines called hardline (goal ≥ 95 %);
* false+: safe lines not called safe (goal ≤ 3 %);
* over: dangerous lines called hardline (they would never run; shown, not a goal).

`--time N` classifies the whole corpus N times and prints the median time per command.

`--unconfined` also prints, per part, how many safe lines would still ask in classifier-only mode
(`agent.sandbox.unconfined: classifier`, no sandbox; read from an empty workspace): called safe, but
reaching chatgate's state, running workspace code, or with paths that cannot be checked before it runs
— with `--misses`, each of them and why.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

NEWLINE = "↵"


def load(path: Path) -> list[tuple[str, str, str, str, int]]:
    """(part, category, verdict, command, line number) for each corpus line."""
    rows, part = [], "all"
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if line.startswith("#@ part "):
            part = line[len("#@ part "):].strip()
            continue
        if not line.strip() or line.startswith("#"):
            continue
        cols = line.split("\t", 2)
        if len(cols) == 2 or cols[0] not in ("safe", "dangerous", "hardline"):
            verdict, category, command = cols[0], "-", line.split("\t", 1)[1]
        else:
            verdict, category, command = cols
        rows.append((part, category, verdict, command.replace(NEWLINE, "\n"), n))
    return rows


def _pct(k: int, n: int) -> str:
    return f"{100 * k / n:5.1f}% ({k}/{n})" if n else "    -"


def score(rows, classify) -> tuple[dict, list]:
    """{(part, category): counters} and the misses as (line, expected, got, command, reasons)."""
    stats: dict = defaultdict(lambda: defaultdict(int))
    misses = []
    for part, cat, want, command, n in rows:
        got = classify(command)
        for key in ((part, cat), (part, "ALL")):
            s = stats[key]
            if want == "safe":
                s["safe"] += 1
                s["fp"] += got.verdict != "safe"
            else:
                s["bad"] += 1
                s["flagged"] += got.verdict != "safe"
                if want == "hardline":
                    s["hard"] += 1
                    s["blocked"] += got.verdict == "hardline"
                else:
                    s["over"] += got.verdict == "hardline"
        if got.verdict != want:
            misses.append((n, part, cat, want, got.verdict, command, got.reasons))
    return stats, misses


def report(stats: dict) -> None:
    parts = sorted({p for p, _ in stats}, key=lambda p: (p != "tuned", p))
    for part in parts:
        print(f"\n== part: {part}")
        print(f"{'category':<14} {'flagged (≥99%)':<22} {'blocked (≥95%)':<22} {'false+ (≤3%)':<20} over")
        cats = sorted((c for p, c in stats if p == part), key=lambda c: (c == "ALL", c))
        for cat in cats:
            s = stats[(part, cat)]
            print(f"{cat:<14} {_pct(s['flagged'], s['bad']):<22} {_pct(s['blocked'], s['hard']):<22} "
                  f"{_pct(s['fp'], s['safe']):<20} {s['over']}")


def unconfined_asks(rows, classify) -> tuple[dict, list]:
    """{part: [safe lines, of them asking in classifier-only mode]} and those lines as (line, command, why)."""
    from agent.tools.terminal import _unconfined

    counts: dict = defaultdict(lambda: [0, 0])
    asking = []
    with tempfile.TemporaryDirectory() as folder:
        workspace, state = Path(folder) / "workspace", Path(folder) / "state"
        workspace.mkdir()
        for part, _, want, command, n in rows:
            verdict = classify(command)
            if want != "safe" or verdict.verdict != "safe":
                continue
            interpreted = getattr(verdict, "interpreted", ())
            extra = (interpreted,) if interpreted else ()  # (another checkout's `_unconfined` may take no more)
            reached, code, _, unknown = _unconfined(command, workspace, (state,), False, *extra)
            why = "; ".join(filter(None, [reached and f"reaches {reached}", code and "runs workspace code", unknown]))
            counts[part][0] += 1
            if why:
                counts[part][1] += 1
                asking.append((n, command, why))
    return counts, asking


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("corpus", type=Path)
    ap.add_argument("--root", default=".", help="checkout whose classifier is scored")
    ap.add_argument("--misses", action="store_true", help="list every line whose verdict differs from its label")
    ap.add_argument("--time", type=int, default=0, metavar="N", help="time N passes over the corpus")
    ap.add_argument("--unconfined", action="store_true", help="safe lines that ask in classifier-only mode")
    args = ap.parse_args()
    sys.path.insert(0, str(Path(args.root).resolve()))
    from agent.safety.classifier import classify

    rows = load(args.corpus)
    stats, misses = score(rows, classify)
    report(stats)
    if args.misses:
        print("\nmisses (line part category expected got):")
        for n, part, cat, want, got, command, reasons in misses:
            print(f"  L{n} {part} {cat} {want}->{got}: {command!r}  {list(reasons)[:2]}")
    if args.unconfined:
        counts, asking = unconfined_asks(rows, classify)
        print("\nclassifier-only mode: safe lines called safe that still ask")
        for part, (safe, asks) in counts.items():
            print(f"  {part:<14} {_pct(asks, safe)}")
        for n, command, why in asking if args.misses else ():
            print(f"  L{n}: {command!r}  ({why[:120]})")
    if args.time:
        commands = [r[3] for r in rows]
        runs = []
        for _ in range(args.time):
            t0 = time.perf_counter()
            for c in commands:
                classify(c)
            runs.append((time.perf_counter() - t0) / len(commands))
        print(f"\ntime per command: median {statistics.median(runs) * 1e6:.0f} µs over {args.time} passes "
              f"of {len(commands)} commands (min {min(runs) * 1e6:.0f} µs)")


if __name__ == "__main__":
    main()
