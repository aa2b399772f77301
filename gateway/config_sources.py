"""Where the configuration comes from, as pydantic-settings sources, and the one line a person sees
when it is wrong.

Three sources, highest priority first: `Environment` (pydantic-settings' own reading of
``CHATGATE_<SECTION>__<KEY>``, each value read as YAML), `EnvironmentAliases` (``OPENAI_API_KEY``,
``TELEGRAM_BOT_TOKEN``… taken verbatim, only for keys the file leaves unset or empty) and `YamlFile`.
Each knows which variable set which key (`origins`: config path -> the variable, and the file it came
from when it did not come from the process: see gateway/config_env.py), so that an error names it,
else the file.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Iterable, Mapping, get_args, get_origin

import yaml
from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, EnvSettingsSource, PydanticBaseSettingsSource

_BLOCKED = object()  # the file has a value that is not a mapping where a path needs a section


class ConfigError(Exception):
    """A configuration problem, phrased as one line for the person who wrote the config."""


class _Loader(yaml.SafeLoader):
    """YAML as people mean it: only true/false are booleans (YAML 1.1 also reads on/off/yes/no,
    which would turn `approvals.mode: off` into False)."""


_Loader.yaml_implicit_resolvers = {
    first: [(tag, regex) for tag, regex in resolvers if tag != "tag:yaml.org,2002:bool"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}
_Loader.add_implicit_resolver("tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"),
                              list("tTfF"))


def _yaml(text: str) -> Any:
    return yaml.load(text, Loader=_Loader)  # noqa: S506 - a SafeLoader subclass


def _in_file(data: dict[str, Any], path: tuple[str, ...]) -> Any:
    """The file's value at `path` (None when unset), or `_BLOCKED`."""
    node: Any = data
    for part in path:
        if node is None:
            return None
        if not isinstance(node, dict):
            return _BLOCKED
        node = node.get(part)
    return node


def _nested(values: Mapping[tuple[str, ...], Any]) -> dict[str, Any]:
    tree: dict[str, Any] = {}
    for path, value in values.items():
        node = tree
        for part in path[:-1]:
            node = node.setdefault(part, {})
        node[path[-1]] = value
    return tree


class YamlFile(PydanticBaseSettingsSource):
    """The YAML file: the one named with `--config` (`required`), else `$CHATGATE_HOME/config.yaml`
    when it exists. Read at once, so that a file that cannot be read is one line too."""

    def __init__(self, settings_cls: type[BaseSettings], path: Path, *, required: bool) -> None:
        super().__init__(settings_cls)
        self.path = path
        self.data: dict[str, Any] = {}
        if required and not path.exists():
            raise ConfigError(f"config error: file not found: {path}")
        if not path.exists():
            return
        try:
            data = _yaml(path.read_text(encoding="utf-8")) or {}
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
            raise ConfigError(f"config error: {path} is not valid YAML{where}") from None
        except OSError as exc:
            raise ConfigError(f"config error: cannot read {path}: {exc.strerror}") from None
        if not isinstance(data, dict):
            raise ConfigError(f"config error: {path} must hold a mapping of sections (llm:, gateway:, …)")
        self.data = data

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return self.data.get(field_name), field_name, False

    def __call__(self) -> dict[str, Any]:
        return self.data


class Environment(EnvSettingsSource):
    """``CHATGATE_<SECTION>__<KEY>`` (the settings' `env_prefix` and `env_nested_delimiter`) from `env`,
    each value read as a YAML scalar; a blank value is unset; a variable for a key inside what the
    file has as a non-mapping is left out (the file's mistake is reported, not hidden)."""

    def __init__(self, settings_cls: type[BaseSettings], env: Mapping[str, str], file: dict[str, Any],
                 described: Mapping[str, str]) -> None:
        prefix, delimiter = settings_cls.model_config["env_prefix"], settings_cls.model_config["env_nested_delimiter"]
        self._variables: dict[tuple[str, ...], str] = {}  # config path -> the variable that set it
        for var, raw in env.items():
            path = tuple(part.lower() for part in var[len(prefix):].split(delimiter))
            if var.startswith(prefix) and len(path) > 1 and all(path) and raw.strip() \
                    and _in_file(file, path) is not _BLOCKED:
                self._variables[path] = var
        self.origins = {path: described.get(var, var) for path, var in self._variables.items()}  # … in words
        self._env = env
        super().__init__(settings_cls)

    def _load_env_vars(self) -> Mapping[str, Any]:  # the variables given, not os.environ (as DotEnvSettingsSource)
        return {var.lower(): _env_value(self._env[var]) for var in self._variables.values()}

    def decode_complex_value(self, field_name: str, field: FieldInfo | None, value: Any) -> Any:
        return value  # read as YAML already

    def __call__(self) -> dict[str, Any]:
        data = super().__call__()
        for path in self._variables:  # an unknown section is an error too, not ignored
            if path[0] not in self.settings_cls.model_fields:
                data.setdefault(path[0], {})
        return data


def _env_value(raw: str) -> Any:
    try:
        value = _yaml(raw)
    except yaml.YAMLError:
        return raw
    return raw if value is None and raw.strip() else value


class EnvironmentAliases(PydanticBaseSettingsSource):
    """The usual variables (`aliases`: variable -> config path), taken verbatim, for the keys the file
    leaves unset or empty."""

    def __init__(self, settings_cls: type[BaseSettings], env: Mapping[str, str], file: dict[str, Any],
                 aliases: Mapping[str, tuple[str, ...]], described: Mapping[str, str]) -> None:
        super().__init__(settings_cls)
        variables = {path: var for var, path in aliases.items() if env.get(var) and _in_file(file, path) in (None, "")}
        self.origins = {path: described.get(var, var) for path, var in variables.items()}  # config path -> in words
        self._values = _nested({path: env[var] for path, var in variables.items()})

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return self._values.get(field_name), field_name, False

    def __call__(self) -> dict[str, Any]:
        return self._values


def _expected_keys(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    """The keys of the section that holds `loc` (for an unknown key)."""
    parts = list(loc[:-1])
    while parts:
        field = model.model_fields.get(parts.pop(0))
        annotation = field.annotation if field else None
        if get_origin(annotation) is dict and parts:  # a mapping of sections, e.g. telegram.chats.<id>
            annotation = get_args(annotation)[1]
            parts.pop(0)
        if not isinstance(annotation, type) or not issubclass(annotation, BaseModel):
            return []
        model = annotation
    return list(model.model_fields)


# pydantic's words where they name its classes ("… or instance of LLMConfig", "… for <class 'pathlib.Path'>")
_WORDS = {"model_type": "input should be a valid dictionary", "path_type": "input should be a valid path"}


def describe(error: ValidationError, model: type[BaseModel], origin: str, sources: dict[tuple[str, ...], str],
             secret: Iterable[tuple[str, ...]] = ()) -> str:
    """The first mistake as one line: the key, what is expected, what was given (never a secret's
    value: `secret` names their paths), and where it came from: the variable that set the key, a key
    inside it or its section, else `origin` (the file); then how many more there are."""
    errors = error.errors()
    first = errors[0]
    loc = tuple(str(part) for part in first["loc"])
    key = ".".join(loc) or "(top level)"
    if first["type"] == "extra_forbidden":
        expected = _expected_keys(model, loc)
        what = "unknown key" + (f"; expected one of: {', '.join(expected)}" if expected else "")
    else:
        what = _WORDS.get(first["type"]) or first["msg"][0].lower() + first["msg"][1:]
        if first["type"] == "value_error":  # our own checks: their words, without pydantic's "Value error, "
            what = str(first["ctx"]["error"])
        if "input" in first and not isinstance(first["input"], (dict, list)) and loc not in set(secret) \
                and "secret" not in key and "token" not in key and "key" not in key:
            what += f" (got {first['input']!r})"
    where = next((var for path, var in sources.items() if path[: len(loc)] == loc or loc[: len(path)] == path), origin)
    more = len(errors) - 1
    return f"config error: {key}: {what} [{where}]" + (f" (and {more} more)" if more else "")
