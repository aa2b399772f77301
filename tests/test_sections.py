"""platforms/sections.py: typed config sections, checked value by value (test_config.py checks
the whole configuration through load_config; these are the rules underneath)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import pytest

from platforms.sections import Invalid, Secret, Section, setting


def _even(value: int) -> int:
    if value % 2:
        raise ValueError("must be even")
    return value


class Inner(Section):
    flag: bool = False
    note: str | None = None


class Outer(Section):
    name: str = "x"
    size: int = setting(4, ge=1, le=10, check=_even)
    ratio: float = setting(0.5, gt=0)
    mode: Literal["a", "b", "c"] = "a"
    folder: Path | None = None
    key: Secret | None = None
    tags: list[str] = []
    inner: Inner = Inner()
    by_id: dict[str, Inner] = {}

    def validate(self) -> None:
        if self.mode == "c" and self.key is None:
            raise ValueError("mode c needs a key")


def mistake(data: dict) -> Invalid:
    with pytest.raises(Invalid) as caught:
        Outer.parse(data, ("outer",))
    return caught.value


def test_values_are_converted_to_their_annotations():
    got = Outer.parse({"name": 12, "size": 6.0, "ratio": "2.5", "mode": "b", "folder": "/srv/x", "key": 123456,
                       "tags": ["a", 2], "inner": {"flag": "yes"}, "by_id": {-100: {"note": 7}}})
    assert (got.name, got.size, got.ratio, got.mode, got.folder) == ("12", 6, 2.5, "b", Path("/srv/x"))
    assert got.key == Secret("123456") and got.key.get_secret_value() == "123456"
    assert got.tags == ["a", "2"] and got.inner == Inner(flag=True)
    assert got.by_id == {"-100": Inner(note="7")}  # numeric ids from YAML become text, keys too


def test_defaults_are_not_shared_between_sections():
    first, second = Outer.parse({}), Outer.parse({})
    first.tags.append("t")
    first.inner.flag = True
    first.by_id["1"] = Inner()
    assert (second.tags, second.inner.flag, second.by_id) == ([], False, {})


@pytest.mark.parametrize(("data", "loc", "message", "given"), [
    ({"size": "many"}, ("outer", "size"), "input should be a valid integer, unable to parse the text as one", "many"),
    ({"size": 12}, ("outer", "size"), "input should be less than or equal to 10", 12),
    ({"size": 0}, ("outer", "size"), "input should be greater than or equal to 1", 0),
    ({"size": 3}, ("outer", "size"), "must be even", 3),
    ({"ratio": 0}, ("outer", "ratio"), "input should be greater than 0", 0),
    ({"size": True}, ("outer", "size"), "input should be a valid integer", True),
    ({"mode": "d"}, ("outer", "mode"), "input should be 'a', 'b' or 'c'", "d"),
    ({"inner": {"flag": "maybe"}}, ("outer", "inner", "flag"), "input should be a valid boolean", "maybe"),
    ({"inner": 5}, ("outer", "inner"), "input should be a valid dictionary", 5),
    ({"tags": "a"}, ("outer", "tags"), "input should be a valid list", "a"),
    ({"tags": [["nested"]]}, ("outer", "tags", "0"), "input should be a valid string", ["nested"]),
    ({"mode": "c"}, ("outer",), "mode c needs a key", None),
])
def test_a_wrong_value_says_where_what_is_expected_and_what_was_given(data, loc, message, given):
    error = mistake(data)
    assert (error.loc, error.message, error.given) == (loc, message, given)


def test_an_unknown_key_lists_the_keys_of_its_section_and_every_mistake_is_counted():
    error = mistake({"sise": 4, "inner": {"flagg": True}, "size": 3})
    assert error.loc == ("outer", "sise") and error.message == "unknown key"
    assert error.expected_keys == ["name", "size", "ratio", "mode", "folder", "key", "tags", "inner", "by_id"]
    assert [e.loc for e in error.all] == [("outer", "sise"), ("outer", "size"), ("outer", "inner", "flagg")]


def test_a_default_goes_through_its_check_too():
    class Checked(Section):
        level: int = setting(3, check=_even)

    with pytest.raises(Invalid, match="must be even"):
        Checked.parse({})


def test_secrets_stay_out_of_reprs_and_dumps_and_are_listed():
    got = Outer.parse({"key": "s3cret", "inner": {"note": "n"}})
    assert "s3cret" not in repr(got) + str(got) + str(got.dump())
    assert got.secrets() == ["s3cret"]
    assert Outer.parse({"key": ""}).secrets() == []
    assert got.dump()["inner"] == {"flag": False, "note": "n"}
