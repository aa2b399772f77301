"""Print deploy/constraints.txt: the version, as installed in this virtual environment, of every
package `chatgate[all]` needs (followed through their own requirements; the dev tools left out).

    make constraints      # = .venv/bin/python deploy/pin_versions.py > deploy/constraints.txt

`make install`, `make test` and the Docker image install with `-c deploy/constraints.txt`, so a
service or an image gets the versions the tests passed with. Needs `packaging` (the dev extra has it).
"""

from __future__ import annotations

from importlib.metadata import distribution

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = "chatgate"


def needed(extras: tuple[str, ...] = ("all",)) -> dict[str, str]:
    """Canonical name -> installed version of every distribution `chatgate[extras]` requires."""
    found: dict[str, str] = {}
    todo, seen = [(ROOT, frozenset(extras))], set()
    while todo:
        name, wanted = todo.pop()
        if (name, wanted) in seen:
            continue
        seen.add((name, wanted))
        for text in distribution(name).requires or []:
            requirement = Requirement(text)
            marker = requirement.marker
            if marker and not any(marker.evaluate({"extra": extra}) for extra in (wanted or {""})):
                continue
            key = canonicalize_name(requirement.name)
            if key != ROOT:
                found[key] = distribution(requirement.name).version
            todo.append((requirement.name, frozenset(requirement.extras)))
    return found


def main() -> None:
    print("# The versions `chatgate[all]` was tested with: `pip install -c deploy/constraints.txt '.[all]'`.")
    print("# Written by `make constraints` (deploy/pin_versions.py) from the venv; do not edit by hand.")
    for name, version in sorted(needed().items()):
        print(f"{name}=={version}")


if __name__ == "__main__":
    main()
