"""chatgate installed where another user can read it: for a test that runs it as that user.

The checkout, and the virtual environment in it, may lie where no one else can read (a clone in `/root`,
or in a `mktemp -d` folder); run from there as `nobody`, Python finds no `gateway` to import. So such a
test makes a fresh virtual environment in a folder anyone may enter, from the interpreter the running one
was made from (a system Python, which every user can run), and copies into it chatgate's packages and
the installed distributions it needs to run (its requirements, and theirs, without the optional extras).
"""

from __future__ import annotations

import shutil
import stat
import subprocess
import sys
import sysconfig
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("gateway", "agent", "platforms")  # chatgate's own (pyproject.toml: packages.find)


def _needed(name: str) -> list[metadata.Distribution]:
    """`name`'s distribution and every one it requires to run, with the extras asked for on the way."""
    found: dict[str, tuple[metadata.Distribution, set[str]]] = {}
    todo: list[tuple[str, set[str]]] = [(name, set())]
    while todo:
        wanted, extras = todo.pop()
        key = canonicalize_name(wanted)
        if key in found and extras <= found[key][1]:
            continue
        dist = metadata.distribution(wanted)
        found[key] = (dist, extras | (found[key][1] if key in found else set()))
        for requirement in map(Requirement, dist.requires or []):
            markers = [{"extra": extra} for extra in ("", *found[key][1])]
            if requirement.marker is None or any(requirement.marker.evaluate(m) for m in markers):
                if canonicalize_name(requirement.name) != key:  # (chatgate[all] names chatgate itself)
                    todo.append((requirement.name, set(requirement.extras)))
    return [dist for dist, _ in found.values()]


def _readable(folder: Path) -> None:
    """Everything under `folder` readable by anyone (folders enterable), whatever the umask was."""
    for path in [folder, *folder.rglob("*")]:
        if not path.is_symlink():
            mode = path.stat().st_mode
            path.chmod(mode | stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH
                       | (stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH if stat.S_ISDIR(mode) else 0))


def readable_install(folder: Path) -> Path:
    """chatgate, installed in `folder` (made readable by anyone); the Python that runs it."""
    env = folder / "env"
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", "--without-pip", str(env)], check=True, capture_output=True)
    site = Path(sysconfig.get_path("purelib", "venv", vars={"base": str(env), "platbase": str(env)}))
    for dist in _needed("chatgate"):
        for file in dist.files or []:
            source = Path(str(dist.locate_file(file)))
            if ".." in file.parts or "__pycache__" in file.parts or not source.is_file() \
                    or file.name.startswith("__editable__"):  # (an editable install points into the checkout)
                continue
            (site / file).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, site / file)
    for package in PACKAGES:
        shutil.copytree(REPO / package, site / package, ignore=shutil.ignore_patterns("__pycache__"),
                        dirs_exist_ok=True)
    _readable(folder)
    return env / "bin" / "python"

