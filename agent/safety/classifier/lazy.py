"""Regular expressions compiled when first used, not when the classifier is imported.

The rules hold about a hundred patterns; compiling them all took some 14 ms of the classifier's
35 ms import, although one command meets only a few of them (`chatgate approvals check "ls -la"`
a handful). A `lazy_re` is compiled at its first use and from then on is the compiled pattern's own
methods, bound in place: a rule calls `.search`, `.match`, … on it exactly as on `re.compile`'s
result, at the same cost. The verdicts cannot differ: the same text and flags are compiled.
"""

from __future__ import annotations

import re
from typing import Any

_DELEGATED = ("search", "match", "fullmatch", "finditer", "findall", "sub", "subn", "split", "pattern", "flags",
              "groups", "groupindex")


class lazy_re:  # noqa: N801 - written where re.compile was, and used as its result
    """`re.compile(source, flags)`, done at the first use."""

    def __init__(self, source: str, flags: int = 0) -> None:
        self._source = source
        self._flags = flags

    def __getattr__(self, name: str) -> Any:
        """Reached only for what is not bound yet: compiles, binds the compiled pattern's methods and
        attributes on this object (later lookups find them directly), and answers."""
        if name.startswith("_") or name not in _DELEGATED:
            raise AttributeError(name)
        compiled = re.compile(self._source, self._flags)
        for attribute in _DELEGATED:
            setattr(self, attribute, getattr(compiled, attribute))
        return getattr(compiled, name)

    def __repr__(self) -> str:
        return f"lazy_re({self._source!r}, {self._flags!r})"
