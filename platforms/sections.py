"""Typed configuration sections, checked value by value, one clear error per mistake.

A section is a class of annotated fields with defaults; it becomes a keyword-only dataclass.
`Section.parse(data)` builds it from what YAML read, checking each value against its
annotation: str, int, float, bool, Path, Literal[...], X | None, list[X], dict[str, X], Secret
and nested sections. `setting(default, gt=, ge=, le=, check=)` adds bounds and a check of its
own; a section's `validate()` checks fields together. Unknown keys are errors. Numbers are
welcome where text is expected (`token: 123456`, Telegram's numeric chat ids as keys). Fields
whose names start with `_` are not configuration.

This replaced pydantic, which was a sixth of the daemon's memory at rest (about 8 MB of 58:
its modules, its compiled core and the schemas it builds) for the few checks done here.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import types
import typing
from pathlib import Path
from typing import Any, Callable, ClassVar, Literal

_FALSE = {"false", "f", "no", "n", "off", "0"}
_TRUE = {"true", "t", "yes", "y", "on", "1"}


class Invalid(Exception):
    """A value that does not fit: where (`loc`), what is expected, what was given."""

    def __init__(self, loc: tuple[str, ...], message: str, given: Any = None, *,
                 expected_keys: list[str] | None = None) -> None:
        super().__init__(f"{'.'.join(loc)}: {message}")
        self.loc = loc
        self.message = message
        self.given = given
        self.expected_keys = expected_keys  # set for an unknown key: the keys its section has
        self.all = [self]  # this mistake and the others found with it, in order


class Secret:
    """A value kept out of logs and reprs; `get_secret_value()` gives it."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def get_secret_value(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "Secret('**********')" if self._value else "Secret('')"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)


def setting(default: Any, *, gt: float | None = None, ge: float | None = None, le: float | None = None,
            check: Callable[[Any], Any] | None = None) -> Any:
    """A field's default with bounds and a check (which returns the value to keep, or raises ValueError)."""
    bounds = {name: value for name, value in (("gt", gt), ("ge", ge), ("le", le)) if value is not None}
    return dataclasses.field(default=default, metadata={"bounds": bounds, "check": check})


class Section:
    """A config section (see the module doc)."""

    __dataclass_fields__: ClassVar[dict[str, dataclasses.Field[Any]]]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for name in cls.__dict__.get("__annotations__", {}):
            value = cls.__dict__.get(name)
            if isinstance(value, (dict, list, Section)):  # a fresh copy for each instance
                setattr(cls, name, dataclasses.field(default_factory=functools.partial(copy.deepcopy, value)))
        dataclasses.dataclass(kw_only=True)(cls)

    @classmethod
    def keys(cls) -> list[str]:
        return [f.name for f in dataclasses.fields(cls) if not f.name.startswith("_")]  # type: ignore[arg-type]

    @classmethod
    def parse(cls, data: Any, loc: tuple[str, ...] = ()) -> Any:
        """The section from a mapping; raises `Invalid` at the first mistake."""
        if not isinstance(data, dict):
            raise Invalid(loc, "input should be a valid dictionary", data)
        keys = cls.keys()
        mistakes = [Invalid((*loc, str(key)), "unknown key", expected_keys=keys)
                    for key in data if str(key) not in keys]
        hints = _hints(cls)
        values: dict[str, Any] = {}
        for field in dataclasses.fields(cls):  # type: ignore[arg-type]
            try:
                if field.name in data:
                    given = data[field.name]
                    values[field.name] = _bounded(field, _convert(hints[field.name], given, (*loc, field.name)),
                                                  given, (*loc, field.name))
                elif field.metadata.get("check") is not None and field.default is not dataclasses.MISSING:
                    values[field.name] = _bounded(field, field.default, field.default, (*loc, field.name))
            except Invalid as exc:
                mistakes.extend(exc.all)
        if mistakes:
            mistakes[0].all = mistakes
            raise mistakes[0]
        section = cls(**values)
        try:
            section.validate()
        except ValueError as exc:
            raise Invalid(loc, str(exc)) from None
        return section

    def validate(self) -> None:
        """Checks of several fields together; raise ValueError with what is wrong."""

    def dump(self) -> dict[str, Any]:
        """The section as plain data, secrets hidden (for showing it)."""
        def plain(value: Any) -> Any:
            if isinstance(value, Section):
                return value.dump()
            if isinstance(value, dict):
                return {k: plain(v) for k, v in value.items()}
            if isinstance(value, list):
                return [plain(v) for v in value]
            if isinstance(value, (Secret, Path)):
                return str(value)
            return value

        return {key: plain(getattr(self, key)) for key in self.keys()}

    def secrets(self) -> list[str]:
        """Every secret value set in the section and the sections in it."""
        found: list[str] = []
        for key in self.keys():
            value = getattr(self, key)
            nested = value.values() if isinstance(value, dict) else [value]
            for item in nested:
                if isinstance(item, Secret) and item.get_secret_value():
                    found.append(item.get_secret_value())
                elif isinstance(item, Section):
                    found.extend(item.secrets())
        return found


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _bounded(field: dataclasses.Field[Any], value: Any, given: Any, loc: tuple[str, ...]) -> Any:
    """`value` (converted from `given`) within the field's bounds and through its check."""
    bounds = field.metadata.get("bounds", {})
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        for name, limit in bounds.items():
            if not {"gt": value > limit, "ge": value >= limit, "le": value <= limit}[name]:
                words = {"gt": "greater than", "ge": "greater than or equal to", "le": "less than or equal to"}[name]
                raise Invalid(loc, f"input should be {words} {limit:g}", given)
    check = field.metadata.get("check")
    if check is not None:
        try:
            return check(value)
        except ValueError as exc:
            raise Invalid(loc, str(exc), given) from None
    return value


def _convert(kind: Any, value: Any, loc: tuple[str, ...]) -> Any:
    """`value` as `kind`, or `Invalid`."""
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        return _convert(inner[0] if len(inner) == 1 else kind, value, loc)
    if origin is Literal:
        if value in args and not isinstance(value, bool):
            return value
        choices = [repr(a) for a in args]
        listed = " or ".join(choices) if len(choices) < 3 else ", ".join(choices[:-1]) + " or " + choices[-1]
        raise Invalid(loc, f"input should be {listed}", value)
    if origin is list:
        if not isinstance(value, list):
            raise Invalid(loc, "input should be a valid list", value)
        return [_convert(args[0], item, (*loc, str(i))) for i, item in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise Invalid(loc, "input should be a valid dictionary", value)
        return {_text(key, (*loc, str(key))): _convert(args[1], item, (*loc, str(key))) for key, item in value.items()}
    if isinstance(kind, type) and issubclass(kind, Section):
        return kind.parse(value, loc)
    convert = _SCALARS.get(kind)
    if convert is None:
        raise TypeError(f"a config field of type {kind!r} is not supported")
    return convert(value, loc)


def _text(value: Any, loc: tuple[str, ...]) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    raise Invalid(loc, "input should be a valid string", value)


def _numeric(kind: type[int] | type[float], word: str) -> Callable[[Any, tuple[str, ...]], Any]:
    """A converter to int or float: from a number (an int only from a whole one), or from text."""
    def convert(value: Any, loc: tuple[str, ...]) -> Any:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            if kind is float or isinstance(value, int) or value.is_integer():
                return kind(value)
        elif isinstance(value, str):
            try:
                return kind(value.strip())
            except ValueError:
                raise Invalid(loc, f"input should be a valid {word}, unable to parse the text as one", value) from None
        raise Invalid(loc, f"input should be a valid {word}", value)

    return convert


def _boolean(value: Any, loc: tuple[str, ...]) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, str)) and str(value).strip().lower() in _TRUE | _FALSE:
        return str(value).strip().lower() in _TRUE
    raise Invalid(loc, "input should be a valid boolean", value)


_SCALARS: dict[Any, Callable[[Any, tuple[str, ...]], Any]] = {
    str: _text, int: _numeric(int, "integer"), float: _numeric(float, "number"), bool: _boolean,
    Path: lambda value, loc: Path(_text(value, loc)),
    Secret: lambda value, loc: Secret(_text(value, loc)),
}
