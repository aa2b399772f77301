"""Review 38: the documents port (memory, skills behind `agent.documents`) and the classifier's printf.

- `FolderDocuments` checked a name's path (links and `..` resolved) and then used the path again: a program that
  swapped a folder for a link between the check and the use (the model's own unconfined command, running in the
  background while it calls `skill_view` / `write_file`) had the read or the write follow the link out of the
  home — a skill's `references/x.md` read a secret, a skill file written as root landed anywhere. The check
  now holds at the moment of use: the folder is opened and where the kernel says it is is what is checked.
- printf's `%c` (the first character), `%.2s` (a precision), `%*s` (a width taken from the arguments) were read
  as the whole argument: `printf '%c%c %c%c%c %c\\n' rA mA -A rA fA ~A | sh` runs `rm -rf ~`, judged "safe".
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from agent.documents import BadName, FolderDocuments
from agent.safety.classifier import classify
from agent.skills import SkillLibrary

# -- a folder swapped for a link between the check and the use ----------------------------------------------------


class Racing(FolderDocuments):
    """A home where another program wins every race: right after a name's path is checked, `swap` runs."""

    def __init__(self, root: Path, swap) -> None:
        super().__init__(root)
        self.swap = swap

    def path(self, name: str) -> Path:
        checked = super().path(name)
        self.swap(name)
        return checked


def folder_to_link(folder: Path, outside: Path):
    """The racing program: `folder` becomes a link to `outside` (once)."""
    def swap(_name: str) -> None:
        if folder.is_dir() and not folder.is_symlink():
            os.rename(folder, folder.with_name(folder.name + ".was"))
            folder.symlink_to(outside, target_is_directory=True)
    return swap


def skill_home(tmp_path: Path) -> tuple[Path, Path]:
    home, outside = tmp_path / "home", tmp_path / "outside"
    (home / "skills" / "a" / "references").mkdir(parents=True)
    (home / "skills" / "a" / "SKILL.md").write_text("---\nname: a\ndescription: d\n---\n\nbody\n")
    (home / "skills" / "a" / "references" / "x.md").write_text("inside")
    outside.mkdir()
    (outside / "x.md").write_text("secret-outside-2b7f")
    return home, outside


async def test_a_read_does_not_follow_a_folder_swapped_for_a_link_after_the_check(tmp_path: Path):
    home, outside = skill_home(tmp_path)
    documents = Racing(home, folder_to_link(home / "skills" / "a" / "references", outside))
    try:
        text = await documents.read("skills/a/references/x.md")
    except BadName:
        text = None
    assert text != "secret-outside-2b7f"
    result = await SkillLibrary(Racing(home, lambda _n: None)).view("a")  # (the library still reads its own)
    assert "body" in result


async def test_a_write_does_not_land_outside_through_a_folder_swapped_after_the_check(tmp_path: Path):
    home, outside = skill_home(tmp_path)
    documents = Racing(home, folder_to_link(home / "skills" / "a" / "references", outside))
    with pytest.raises(BadName):
        await documents.write("skills/a/references/new.md", "planted")
    assert not (outside / "new.md").exists()


async def test_a_delete_and_a_move_do_not_reach_outside_through_a_swapped_folder(tmp_path: Path):
    home, outside = skill_home(tmp_path)
    documents = Racing(home, folder_to_link(home / "skills" / "a" / "references", outside))
    with pytest.raises(BadName):
        await documents.delete("skills/a/references/x.md")
    assert (outside / "x.md").read_text() == "secret-outside-2b7f"
    home2, outside2 = skill_home(tmp_path / "2")
    moving = Racing(home2, folder_to_link(home2 / "skills" / "a" / "references", outside2))
    with pytest.raises(BadName):
        await moving.copy("skills/a/references/x.md", "skills/b/references/x.md")
    assert not (home2 / "skills" / "b" / "references" / "x.md").exists()


async def test_the_folder_still_serves_links_that_stay_inside(tmp_path: Path):
    home, _outside = skill_home(tmp_path)
    (home / "skills" / "a" / "references" / "same.md").symlink_to("x.md")
    documents = FolderDocuments(home)
    assert await documents.read("skills/a/references/same.md") == "inside"
    await documents.write("skills/a/templates/t.md", "t")
    assert await documents.read("skills/a/templates/t.md") == "t"
    assert await documents.move("skills/a/templates", "skills/b/templates") == 1
    assert await documents.copy("skills/b", "skills/c") == 1
    assert await documents.read("skills/c/templates/t.md") == "t"
    assert await documents.delete_all("skills/c") == 1 and not (home / "skills" / "c").exists()


# -- printf: what the classifier did not compute ----------------------------------------------------------------


@pytest.mark.parametrize("line", [
    "printf '%c%c %c%c%c %c\\n' rA mA -A rA fA ~A | sh",
    "printf '%.2s -rf %.1s\\n' rmdir ~foo | bash",
    "printf '%*s\\n' 3 'rm -rf ~' | sh",
    "printf '%-*s\\n' 3 'rm -rf ~' | sh",
    "$(printf '%c%c' rA mA) -rf ~",
    "x=$(printf '%.2s' rmdir); $x -rf ~",
])
def test_printf_output_the_check_cannot_compute_is_never_safe_to_run(line: str):
    assert classify(line).verdict != "safe"


def test_printf_the_check_computes_stays_as_it_was():
    assert classify("printf '%05d|%-3s|%3s|%%\\n' 3 a b").verdict == "safe"
    assert classify("printf 'hello %s\\n' world | sort").verdict == "safe"
    assert classify("printf '%s %d\\n' 'rm -rf ~' 1 | sh").verdict == "hardline"
