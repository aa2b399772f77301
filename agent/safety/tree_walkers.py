"""Programs that read a folder whole and, given no folder, read the current one (`du -L`, `find -L -name x`,
`rg x`, `grep -r x`): whether a command of theirs names no path, so that where it reads is `.`.

The state check (`agent.safety.reach`) looks in a folder a command reads whole for links into chatgate's
state; a command of these with no path operand is read as naming `.`. Options are read as the programs
read them; an option this does not know is taken, where that matters, the way that makes it name `.`
(a long option with no `=` takes the next word), so a mistake here costs a look too many, never one too few.
"""

from __future__ import annotations

from dataclasses import dataclass

_LONG_FLAGS = frozenset("""--recursive --dereference-recursive --follow --dereference --hidden --no-ignore
    --ignore-case --smart-case --line-number --files-with-matches --files-without-match --count --all --summarize
    --human-readable --fixed-strings --word-regexp --line-regexp --extended-regexp --perl-regexp --invert-match
    --no-messages --with-filename --no-filename --only-matching --quiet --silent --null --apparent-size
    --bytes --total --one-file-system --full-path --absolute-path --files --unrestricted --binary --text
    --no-heading --heading --vimgrep --json --long --almost-all --classify --directory""".split())


@dataclass(frozen=True)
class Walker:
    valued: str = ""  # short options that take a value (the rest of the word, or the next word)
    pattern_first: bool = False  # its first operand is a pattern, unless an option of `pattern_given_by` gives it
    pattern_given_by: frozenset[str] = frozenset()
    walks_with: frozenset[str] = frozenset()  # the options that make it walk a tree (none: it always does)


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


_GREP = Walker("ABCDdefm", True, _words("-e -f --regexp --file"),
               _words("-r -R --recursive --dereference-recursive -d=recurse --directories=recurse"))
_FD = Walker("cdEeojSTtXx", True)
WALKERS = {
    "grep": _GREP, "egrep": _GREP, "fgrep": _GREP, "ugrep": _GREP,
    "rg": Walker("ABCEdefgjMmrTt", True, _words("-e -f --regexp --file")),
    "ag": Walker("ABCGgmp", True, _words("-g")),
    "ack": Walker("ABCgm", True, _words("-g")),
    "fd": _FD, "fdfind": _FD,
    "du": Walker("BdtX"),
    "tree": Walker("HILoPT"),
    "ls": Walker("ITw", walks_with=_words("-R --recursive")),
}
NAMES = frozenset(WALKERS) | {"find"}


def reads_current_folder(name: str, args: list[str]) -> bool:
    """Whether `name args` reads the current folder whole: a program of `WALKERS` (walking, for one that does
    only with an option) or `find`, with no path operand."""
    if name == "find":
        return not _find_names_a_path(args)
    walker = WALKERS.get(name)
    if walker is None:
        return False
    options, operands = _options_and_operands(walker, args)
    if walker.walks_with and not walker.walks_with.intersection(options):
        return False
    if walker.pattern_first and not walker.pattern_given_by.intersection(o.partition("=")[0] for o in options):
        operands = operands[1:]
    return not operands


def _options_and_operands(walker: Walker, args: list[str]) -> tuple[list[str], list[str]]:
    """The options (`-r`, or `-d=recurse` with its value) and the operands of `args`."""
    options: list[str] = []
    operands: list[str] = []
    words = iter(args)
    for word in words:
        if word == "--":
            operands += words
        elif word.startswith("--"):
            takes_next = "=" not in word and word not in _LONG_FLAGS
            options.append(f"{word}={next(words, '')}" if takes_next else word)
        elif word.startswith("-") and len(word) > 1:
            for at, letter in enumerate(word[1:], 1):
                if letter in walker.valued:
                    options.append(f"-{letter}={word[at + 1:] or next(words, '')}")
                    break
                options.append(f"-{letter}")
        else:
            operands.append(word)
    return options, operands


def _find_names_a_path(args: list[str]) -> bool:
    """Whether `find` is given a path to start from: a word after its own options (-H, -L, -P, -D list,
    -O level) that does not begin its expression."""
    words = iter(args)
    for word in words:
        if word == "-D":
            next(words, None)
        elif not (word in ("-H", "-L", "-P") or word.startswith("-O")):
            return not word.startswith(("-", "(", "!", ","))
    return False
