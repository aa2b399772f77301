"""Configuration: `$CHATGATE_HOME/config.yaml`, then environment overrides, validated by type.

Any key can be overridden as ``CHATGATE_<SECTION>__<KEY>`` (values are read as YAML scalars, so
``8080`` is a number and ``[a, b]`` a list). ``OPENAI_BASE_URL``, ``OPENAI_API_KEY`` and
``CHATGATE_MODEL`` fill the LLM settings when the file leaves them unset. A wrong key or value
raises `ConfigError` whose message is one line naming the key and what is expected.
"""

from __future__ import annotations

import os
import re
from dataclasses import field
from pathlib import Path
from typing import Any, Literal, Mapping
from urllib.parse import urlsplit
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import yaml

from platforms.config import PlatformConfig
from platforms.registry import specs
from platforms.sections import Invalid, Secret, Section, setting

DEFAULT_IDENTITY = (
    "You are a helpful assistant reached through a chat app. Answer clearly and concisely; "
    "use Markdown sparingly. Use tools when they help, and say so when you cannot do something."
)


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


class ConfigError(Exception):
    """A configuration problem, phrased as one line for the person who wrote the config."""


def _known_zone(value: str | None) -> str | None:
    if value is not None:
        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError, OSError):
            raise ValueError("unknown time zone; use an IANA name such as Europe/Berlin or UTC") from None
    return value


def _absolute_url(value: str | None) -> str | None:
    if value is not None and (urlsplit(value).scheme not in ("http", "https") or not urlsplit(value).hostname):
        raise ValueError("must be an absolute http(s) URL, e.g. https://chat.example.org")
    return value.rstrip("/") if value else value


class AuxiliaryLLMConfig(Section):
    """The model for the agent's background work (reviews, the curator's consolidation); each
    setting left unset is the main one's."""

    base_url: str | None = None
    api_key: Secret | None = None
    model: str | None = None


class LLMConfig(Section):
    base_url: str | None = None
    api_key: Secret | None = None
    model: str = "gpt-4o-mini"
    timeout_seconds: float = setting(120.0, gt=0)  # between reads of one request
    max_retries: int = setting(3, ge=0, le=10)
    # how long a turn waits on the model at a time (retries and pauses included; each streamed piece of the
    # answer gives it this long again); then the person is told it did not answer in time
    turn_timeout_seconds: float = setting(180.0, gt=0)
    temperature: float | None = setting(None, ge=0, le=2)
    auxiliary: AuxiliaryLLMConfig = AuxiliaryLLMConfig()
    # tokens the model takes (compression keeps requests within); unset: what the endpoint's model
    # listing states, else 128000
    context_window: int | None = setting(None, ge=1024)

    @property
    def configured(self) -> bool:
        """True when there is somewhere to send requests: a server URL or an OpenAI key."""
        return bool(self.base_url or self.api_key)


class GatewayConfig(Section):
    tick_seconds: float = setting(60.0, gt=0)
    timezone: str | None = setting(None, check=_known_zone)
    busy_policy: Literal["queue", "interrupt", "steer"] = "queue"
    group_sessions: Literal["per_user", "shared"] = "per_user"
    session_idle_seconds: float = setting(300.0, gt=0)
    drain_seconds: float = setting(30.0, ge=0)
    retention_days: float = setting(7.0, gt=0)  # finished inbox/outbox rows and received files older than this go
    # (and decided approvals, subagent runs, dead letters; token usage is then kept as daily sums)
    # sessions ended and untouched this long are deleted with their messages; unset: transcripts are kept
    transcript_retention_days: float | None = setting(None, gt=0)
    durability: Literal["full", "normal"] = "full"  # full: acknowledged messages survive a power loss
    # how long a write waits for another program's lock on the database (a backup, a `sqlite3` shell);
    # then it is refused: a message is not acknowledged and comes again, /readyz says storage is not ready
    lock_wait_seconds: float = setting(5.0, gt=0, le=600)
    max_message_chars: int = setting(32_000, ge=100)  # longer messages are refused with a clear reply
    max_waiting_messages: int = setting(20, ge=1)  # per person in a conversation, beyond the running turn
    max_waiting_per_conversation: int = setting(100, ge=1)  # all people's together (a shared group, a thread)
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    log_format: Literal["text", "json"] = "text"  # json: one object per line, for journald/Docker log shippers
    event_loop: Literal["auto", "uvloop", "asyncio"] = "auto"  # auto: uvloop when installed (chatgate[fast])


class SandboxConfig(Section):
    mode: Literal["auto", "bwrap", "off"] = "auto"  # auto: bubblewrap where it works, else unconfined (warned)
    network: Literal["off", "on"] = "off"  # whether sandboxed commands reach the network
    # without a sandbox: "allowlist" runs only short read-only commands on workspace files unasked;
    # "classifier" (an explicit, loudly logged opt-in) runs whatever the classifier calls safe
    unconfined: Literal["allowlist", "classifier"] = "allowlist"


class AgentConfig(Section):
    identity: str = DEFAULT_IDENTITY
    max_iterations: int = setting(60, ge=1, le=500)
    workspace: Path | None = None  # where the terminal and file tools work; default $CHATGATE_HOME/workspace
    command_timeout_seconds: float = setting(60.0, gt=0, le=3600)
    sandbox: SandboxConfig = SandboxConfig()


class DelegationConfig(Section):
    enabled: bool = True  # the delegate_task tool: subagents working side by side
    max_concurrent: int = setting(3, ge=1, le=16)  # subagents of one person working at once (all their turns)
    max_children_per_turn: int = setting(20, ge=1, le=500)  # subagents one turn may start in all (any depth)
    max_iterations: int = setting(50, ge=1, le=500)  # steps each child may take
    max_depth: int = setting(2, ge=1, le=5)  # children at this depth cannot delegate further


class ApprovalsConfig(Section):
    mode: Literal["ask", "deny", "off"] = "ask"  # off: everything but hardline runs; deny: no prompts
    timeout_seconds: float = setting(300.0, gt=0)
    cron: Literal["deny", "ask-owner"] = "deny"  # scheduled runs: refuse, or ask the job's owner in their chat
    always_scope: Literal["user", "chat", "global"] = "user"  # what an admin's "Always allow" covers
    paired_may_approve: bool = False  # people admitted by pairing decide their own requests too (else: admins)


class CronConfig(Section):
    grace_seconds: float = setting(3600.0, ge=0)  # a run missed while down still runs once if this recent
    max_concurrent_runs: int = setting(4, ge=1, le=64)
    run_timeout_seconds: float = setting(900.0, gt=0)
    min_interval_seconds: float = setting(60.0, ge=1)  # the shortest `every`
    max_jobs_per_person: int = setting(20, ge=1)  # (admins: no limit)
    keep_runs: int = setting(100, ge=1)  # ledger rows kept per job (with each run's transcript); older ones go


class CompressionConfig(Section):
    enabled: bool = True
    threshold: float = setting(0.5, gt=0, le=0.95)  # of llm.context_window: a request above it is compressed first
    protect_last_n: int = setting(20, ge=2)  # the latest messages always sent word for word


class GoalsConfig(Section):
    max_turns: int = setting(20, ge=1, le=500)  # turns a /goal may take before it stops (/goal resume: as many more)
    max_resumes_per_day: int = setting(10, ge=0, le=1000)  # /goal resume giving more turns, per person per 24 h


class ReviewConfig(Section):
    enabled: bool = True
    memory_every_turns: int = setting(10, ge=1)  # user turns between memory reviews of a session
    skill_every_iterations: int = setting(10, ge=1)  # tool iterations between skill reviews of a session
    max_concurrent: int = setting(2, ge=1, le=16)
    max_iterations: int = setting(16, ge=1, le=64)
    model: str | None = None  # a cheaper model for reviews; default llm.model
    notify: bool = False  # post a one-line summary of what a review kept to the chat
    after_pause_seconds: float = setting(2.0, ge=0)  # a review waits until its conversation pauses this long


class CuratorConfig(Section):
    enabled: bool = True
    interval_hours: float = setting(168.0, gt=0)
    min_idle_hours: float = setting(2.0, ge=0)  # no inbound message and no turn running for this long
    stale_days: float = setting(30.0, gt=0)
    archive_days: float = setting(90.0, gt=0)
    keep_snapshots: int = setting(5, ge=1, le=100)
    keep_reports: int = setting(50, ge=1, le=10_000)  # runs' folders under logs/curator/ (those with a snapshot stay)
    consolidate: bool = False  # after the deterministic pass, let the LLM merge overlapping agent skills
    notify_admins: bool = True  # tell access.admins (in their direct chats) what a run changed


class TrajectoriesConfig(Section):
    enabled: bool = False  # export finished sessions as ShareGPT JSONL under trajectories/
    retention_days: float | None = setting(None, gt=0)  # unset: the export is kept until the operator moves it


class HttpConfig(Section):
    host: str = "127.0.0.1"
    port: int = setting(8765, ge=0, le=65535)
    # e.g. https://chat.example.org behind a reverse proxy: its host is accepted
    public_url: str | None = setting(None, check=_absolute_url)


class _Platforms(Section):
    """`platforms:`; one section per platform package (see `platforms.registry`)."""

    def sections(self) -> dict[str, PlatformConfig]:
        return {name: getattr(self, name) for name in self.keys()}

    def require_mention(self, platform: str, chat_id: str) -> bool:
        """Whether the bot answers in this group only when addressed."""
        section = getattr(self, platform, None)
        return section.require_mention_in(chat_id) if isinstance(section, PlatformConfig) else True


PlatformsConfig = type("PlatformsConfig", (_Platforms,), {
    "__annotations__": {name: spec.config for name, spec in specs().items()},
    **{name: spec.config() for name, spec in specs().items()}})


class AccessConfig(Section):
    allowed_users: dict[str, list[str]] = {}
    admins: dict[str, list[str]] = {}
    dm_policy: Literal["pairing", "allowlist", "open"] = "pairing"
    # shared notes and skills written in conversations of people who are not admins: wait for an admin / allow
    untrusted_learning: Literal["quarantine", "allow"] = "quarantine"


class Config(Section):
    llm: LLMConfig = LLMConfig()
    gateway: GatewayConfig = GatewayConfig()
    agent: AgentConfig = AgentConfig()
    http: HttpConfig = HttpConfig()
    platforms: PlatformsConfig = PlatformsConfig()  # type: ignore[valid-type]
    access: AccessConfig = AccessConfig()
    approvals: ApprovalsConfig = ApprovalsConfig()
    cron: CronConfig = CronConfig()
    review: ReviewConfig = ReviewConfig()
    compression: CompressionConfig = CompressionConfig()
    goals: GoalsConfig = GoalsConfig()
    delegation: DelegationConfig = DelegationConfig()
    curator: CuratorConfig = CuratorConfig()
    trajectories: TrajectoriesConfig = TrajectoriesConfig()

    _home: Path = field(default_factory=lambda: default_home(), init=False, repr=False)
    _file: Path | None = field(default=None, init=False, repr=False)  # the one named with --config

    @property
    def home(self) -> Path:
        return self._home

    @property
    def file(self) -> Path:
        """The config file: the one named with `--config`, else `$CHATGATE_HOME/config.yaml`."""
        return (self._file or self._home / "config.yaml").absolute()

    def private_paths(self) -> list[Path]:
        """What the agent's commands must neither see nor reach (resolved): the home, and the config
        file's folder — or only the file, when that folder holds the workspace or is shared with the
        rest of the system (`/`, `/etc`, `/usr/...`, the user's home)."""
        home, file = Path(os.path.realpath(self._home)), Path(os.path.realpath(self.file))
        if file.is_relative_to(home):
            return [home]
        folder, workspace = file.parent, Path(os.path.realpath(self.workspace))
        shared = len(folder.parts) <= 2 or folder.is_relative_to("/usr") or folder == Path.home().resolve() \
            or workspace.is_relative_to(folder)
        return [home, file if shared else folder]

    def workspace_problem(self) -> str | None:
        """Why the agent cannot work in the workspace (it holds chatgate's state or its config file:
        the file tools would reach both unasked), or None."""
        workspace = Path(os.path.realpath(self.workspace))
        for what, path in (("chatgate's state (CHATGATE_HOME={})", self._home), ("the config file {}", self.file)):
            if Path(os.path.realpath(path)).is_relative_to(workspace):
                return (f"agent.workspace {workspace} contains {what.format(os.path.realpath(path))}, which the "
                        "agent's tools would then reach unasked; choose a folder of its own "
                        "(the default is $CHATGATE_HOME/workspace)")
        return None

    @property
    def db_path(self) -> Path:
        return self._home / "state.db"

    @property
    def workspace(self) -> Path:
        return (self.agent.workspace or self._home / "workspace").expanduser()


def default_home(env: Mapping[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    return Path(env.get("CHATGATE_HOME") or "~/.chatgate").expanduser()


_ALIASES = {  # environment variable -> config path, used when the file leaves the key unset
    "OPENAI_BASE_URL": ("llm", "base_url"),
    "OPENAI_API_KEY": ("llm", "api_key"),
    "CHATGATE_MODEL": ("llm", "model"),
    **{var: ("platforms", name, key) for name, spec in specs().items() for var, key in spec.env.items()},
}


def _set_path(data: dict[str, Any], path: tuple[str, ...], value: Any, *, overwrite: bool) -> bool:
    """Set `value` at `path`; False when it was not set (the key is set already and not
    `overwrite`, or the file has a non-mapping where a section belongs: that is its error)."""
    node = data
    for part in path[:-1]:
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        if not isinstance(child, dict):
            return False
        node = child
    if overwrite or node.get(path[-1]) in (None, ""):
        node[path[-1]] = value
        return True
    return False


def _env_value(raw: str) -> Any:
    try:
        value = _yaml(raw)
    except yaml.YAMLError:
        return raw
    return raw if value is None and raw.strip() else value


def _apply_env(data: dict[str, Any], env: Mapping[str, str]) -> dict[tuple[str, ...], str]:
    """Apply environment overrides in place; return which path came from which variable."""
    sources: dict[tuple[str, ...], str] = {}
    for var, path in _ALIASES.items():
        if env.get(var) and _set_path(data, path, env[var], overwrite=False):
            sources[path] = var
    for var, raw in env.items():
        if not var.startswith("CHATGATE_") or "__" not in var:
            continue
        path = tuple(p.lower() for p in var[len("CHATGATE_"):].split("__"))
        if all(path) and raw.strip() and _set_path(data, path, _env_value(raw), overwrite=True):  # empty: unset
            sources[path] = var
    return sources


def _describe(error: Invalid, origin: str, sources: dict[tuple[str, ...], str]) -> str:
    key = ".".join(error.loc) or "(top level)"
    if error.expected_keys is not None:
        what = "unknown key" + (f"; expected one of: {', '.join(error.expected_keys)}" if error.expected_keys else "")
    else:
        what = error.message
        if error.given is not None and not isinstance(error.given, (dict, list)) and "secret" not in key \
                and "token" not in key and "key" not in key:
            what += f" (got {error.given!r})"
    # the variable that set this key, a key inside it, or the section it is in
    where = next((var for path, var in sources.items() if path[: len(error.loc)] == error.loc
                  or error.loc[: len(path)] == path), origin)
    more = len(error.all) - 1
    return f"config error: {key}: {what} [{where}]" + (f" (and {more} more)" if more else "")


def load_config(path: Path | str | None = None, env: Mapping[str, str] | None = None) -> Config:
    """Read, merge and validate the configuration; raise `ConfigError` on any problem."""
    env = os.environ if env is None else env
    home = default_home(env)
    file = Path(path).expanduser() if path else home / "config.yaml"
    data: Any = {}
    if path and not file.exists():
        raise ConfigError(f"config error: file not found: {file}")
    if file.exists():
        try:
            data = _yaml(file.read_text(encoding="utf-8")) or {}
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
            raise ConfigError(f"config error: {file} is not valid YAML{where}") from None
        except OSError as exc:
            raise ConfigError(f"config error: cannot read {file}: {exc.strerror}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"config error: {file} must hold a mapping of sections (llm:, gateway:, …)")
    sources = _apply_env(data, env)
    try:
        config = Config.parse(data)
    except Invalid as exc:
        raise ConfigError(_describe(exc, str(file), sources)) from None
    config._home = home
    config._file = file if path else None
    return config
