"""Configuration: pydantic models, read by pydantic-settings from `$CHATGATE_HOME/config.yaml` (or
`--config PATH`) and the environment.

Any key can be overridden as ``CHATGATE_<SECTION>__<KEY>`` (values are read as YAML scalars, so
``8080`` is a number and ``[a, b]`` a list). ``OPENAI_BASE_URL``, ``OPENAI_API_KEY``,
``CHATGATE_MODEL`` and each platform's variables (``TELEGRAM_BOT_TOKEN``…) fill what the file leaves
unset. A wrong key or value raises `ConfigError` whose message is one line naming the key, what is
expected and where it came from (gateway/config_sources.py).
"""

from __future__ import annotations

import os
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Mapping, get_args
from urllib.parse import unquote, urlsplit
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import BaseModel, Field, PrivateAttr, SecretStr, ValidationError, create_model, field_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from gateway.config_env import read_environment
from gateway.config_sources import ConfigError, Environment, EnvironmentAliases, YamlFile, describe
from gateway.ops.process import home_from_env
from platforms.config import PlatformConfig, section
from platforms.config import Section as _Section
from platforms.registry import AdapterEnv, build, specs

if TYPE_CHECKING:
    from platforms.base import PlatformAdapter

_SOURCES: ContextVar[tuple[PydanticBaseSettingsSource, ...]] = ContextVar("config_sources")  # see load_config

DEFAULT_IDENTITY = (
    "You are a helpful assistant reached through a chat app. Answer clearly and concisely; "
    "use Markdown sparingly. Use tools when they help, and say so when you cannot do something."
)


class AuxiliaryLLMConfig(_Section):
    """The model for the agent's background work (reviews, the curator's consolidation); each
    setting left unset is the main one's."""

    base_url: str | None = None
    api_key: SecretStr | None = None
    model: str | None = None


class LLMConfig(_Section):
    base_url: str | None = None
    api_key: SecretStr | None = None
    model: str = "gpt-4o-mini"
    timeout_seconds: float = Field(120.0, gt=0)  # between reads of one request
    max_retries: int = Field(3, ge=0, le=10)
    # how long a turn waits on the model at a time (retries and pauses included; each streamed piece of the
    # answer gives it this long again); then the person is told it did not answer in time
    turn_timeout_seconds: float = Field(180.0, gt=0)
    temperature: float | None = Field(None, ge=0, le=2)
    auxiliary: AuxiliaryLLMConfig = section()
    # tokens the model takes (compression keeps requests within); unset: what the endpoint's model
    # listing states, else 128000
    context_window: int | None = Field(None, ge=1024)

    @property
    def configured(self) -> bool:
        """True when there is somewhere to send requests: a server URL or an OpenAI key."""
        return bool(self.base_url or self.api_key)


class GatewayConfig(_Section):
    tick_seconds: float = Field(60.0, gt=0)
    timezone: str | None = None
    busy_policy: Literal["queue", "interrupt", "steer"] = "queue"
    group_sessions: Literal["per_user", "shared"] = "per_user"
    session_idle_seconds: float = Field(300.0, gt=0)
    drain_seconds: float = Field(30.0, ge=0)
    retention_days: float = Field(7.0, gt=0)  # finished inbox/outbox rows and received files older than this go
    # (and decided approvals, subagent runs, dead letters; token usage is then kept as daily sums)
    # sessions ended and untouched this long are deleted with their messages; unset: transcripts are kept
    transcript_retention_days: float | None = Field(None, gt=0)
    durability: Literal["full", "normal"] = "full"  # full: acknowledged messages survive a power loss
    # how long a write waits for another program's lock on the database (a backup, a `sqlite3` shell);
    # then it is refused: a message is not acknowledged and comes again, /readyz says storage is not ready
    lock_wait_seconds: float = Field(5.0, gt=0, le=600)
    max_message_chars: int = Field(32_000, ge=100)  # longer messages are refused with a clear reply
    max_waiting_messages: int = Field(20, ge=1)  # per person in a conversation, beyond the running turn
    max_waiting_per_conversation: int = Field(100, ge=1)  # all people's together (a shared group, a thread)
    max_commands_per_minute: int = Field(20, ge=1)  # a person's chat commands in a chat (/stop, answers: see inbound)
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    log_format: Literal["text", "json"] = "text"  # json: one object per line, for journald/Docker log shippers
    event_loop: Literal["auto", "uvloop", "asyncio"] = "auto"  # auto: uvloop when installed (chatgate[fast])

    @field_validator("timezone")
    @classmethod
    def _known_zone(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                ZoneInfo(value)
            except (ZoneInfoNotFoundError, ValueError, OSError):
                raise ValueError("unknown time zone; use an IANA name such as Europe/Berlin or UTC") from None
        return value


class SandboxConfig(_Section):
    mode: Literal["auto", "bwrap", "off"] = "auto"  # auto: bubblewrap where it works, else unconfined (warned)
    network: Literal["off", "on"] = "off"  # whether sandboxed commands reach the network
    # without a sandbox: "allowlist" runs only short read-only commands on workspace files unasked;
    # "classifier" (an explicit, loudly logged opt-in) runs whatever the classifier calls safe
    unconfined: Literal["allowlist", "classifier"] = "allowlist"


class AgentConfig(_Section):
    identity: str = DEFAULT_IDENTITY
    max_iterations: int = Field(60, ge=1, le=500)
    workspace: Path | None = None  # where the terminal and file tools work; default $CHATGATE_HOME/workspace
    command_timeout_seconds: float = Field(60.0, gt=0, le=3600)
    sandbox: SandboxConfig = section()


class DelegationConfig(_Section):
    enabled: bool = True  # the delegate_task tool: subagents working side by side
    max_concurrent: int = Field(3, ge=1, le=16)  # subagents of one person working at once (all their turns)
    max_children_per_turn: int = Field(20, ge=1, le=500)  # subagents one turn may start in all (any depth)
    max_iterations: int = Field(50, ge=1, le=500)  # steps each child may take
    max_depth: int = Field(2, ge=1, le=5)  # children at this depth cannot delegate further


class ApprovalsConfig(_Section):
    mode: Literal["ask", "deny", "off"] = "ask"  # off: everything but hardline runs; deny: no prompts
    timeout_seconds: float = Field(300.0, gt=0)
    cron: Literal["deny", "ask-owner"] = "deny"  # scheduled runs: refuse, or ask the job's owner in their chat
    always_scope: Literal["user", "chat", "global"] = "user"  # what an admin's "Always allow" covers
    paired_may_approve: bool = False  # people admitted by pairing decide their own requests too (else: admins)


class CronConfig(_Section):
    grace_seconds: float = Field(3600.0, ge=0)  # a run missed while down still runs once if this recent
    max_concurrent_runs: int = Field(4, ge=1, le=64)
    run_timeout_seconds: float = Field(900.0, gt=0)
    min_interval_seconds: float = Field(60.0, ge=1)  # the shortest `every`
    max_jobs_per_person: int = Field(20, ge=1)  # (admins: no limit)
    keep_runs: int = Field(100, ge=1)  # ledger rows kept per job (with each run's transcript); older ones go


class CompressionConfig(_Section):
    enabled: bool = True
    threshold: float = Field(0.5, gt=0, le=0.95)  # of llm.context_window: a request above it is compressed first
    protect_last_n: int = Field(20, ge=2)  # the latest messages always sent word for word


class GoalsConfig(_Section):
    max_turns: int = Field(20, ge=1, le=500)  # turns a /goal may take before it stops (/goal resume: as many more)
    max_resumes_per_day: int = Field(10, ge=0, le=1000)  # /goal resume giving more turns, per person per 24 h


class BoardConfig(_Section):
    max_running: int = Field(2, ge=1, le=64)  # tasks run at once (by every instance together)
    max_turns: int | None = Field(None, ge=1, le=500)  # turns a task's run may take; None: goals.max_turns
    max_attempts: int = Field(3, ge=1, le=50)  # runs of a task, in all, before it is blocked for a person
    stale_seconds: float = Field(60.0, ge=1, le=3600)  # a run whose heartbeat is older is lost: anyone reclaims it
    retry_seconds: float = Field(30.0, ge=0, le=86400)  # a failed run's backoff, doubling with each attempt
    run_timeout_seconds: float = Field(3600.0, gt=0, le=7 * 86400)  # one run of a task, at most; then it failed


class ReviewConfig(_Section):
    enabled: bool = True
    memory_every_turns: int = Field(10, ge=1)  # user turns between memory reviews of a session
    skill_every_iterations: int = Field(10, ge=1)  # tool iterations between skill reviews of a session
    max_concurrent: int = Field(2, ge=1, le=16)
    max_iterations: int = Field(16, ge=1, le=64)
    model: str | None = None  # a cheaper model for reviews; default llm.model
    notify: bool = False  # post a one-line summary of what a review kept to the chat
    after_pause_seconds: float = Field(2.0, ge=0)  # a review waits until its conversation pauses this long


class CuratorConfig(_Section):
    enabled: bool = True
    interval_hours: float = Field(168.0, gt=0)
    min_idle_hours: float = Field(2.0, ge=0)  # no inbound message and no turn running for this long
    stale_days: float = Field(30.0, gt=0)
    archive_days: float = Field(90.0, gt=0)
    keep_snapshots: int = Field(5, ge=1, le=100)
    keep_reports: int = Field(50, ge=1, le=10_000)  # runs' folders under logs/curator/ (those with a snapshot stay)
    consolidate: bool = False  # after the deterministic pass, let the LLM merge overlapping agent skills
    notify_admins: bool = True  # tell access.admins (in their direct chats) what a run changed


class TrajectoriesConfig(_Section):
    enabled: bool = False  # export finished sessions as ShareGPT JSONL under trajectories/
    retention_days: float | None = Field(None, gt=0)  # unset: the export is kept until the operator moves it


class HttpConfig(_Section):
    host: str = "127.0.0.1"
    port: int = Field(8765, ge=0, le=65535)
    # e.g. https://chat.example.org behind a reverse proxy: its host is accepted
    public_url: str | None = None

    @field_validator("public_url")
    @classmethod
    def _absolute_url(cls, value: str | None) -> str | None:
        if value is not None and (urlsplit(value).scheme not in ("http", "https") or not urlsplit(value).hostname):
            raise ValueError("must be an absolute http(s) URL, e.g. https://chat.example.org")
        return value.rstrip("/") if value else value


class StorageConfig(_Section):
    # unset: SQLite in the home ($CHATGATE_HOME/state.db), one instance; postgresql://user[:password]@host[:port]/dbname:
    # PostgreSQL, which several instances may share (a secret: it may hold a password)
    url: SecretStr | None = None

    @field_validator("url")
    @classmethod
    def _postgres_url(cls, value: SecretStr | None) -> SecretStr | None:
        if value is None or not value.get_secret_value():
            return None
        problem = postgres_url_problem(value.get_secret_value())
        if problem is not None:
            raise ValueError(f"{problem} (unset: SQLite in the home)")
        return value


def postgres_url_problem(url: str) -> str | None:
    """What is wrong with a PostgreSQL address, in words that never repeat it (it may hold a password); None:
    nothing. A password's `@`, `/`, `?` or `#` must be percent-encoded: written raw, asyncpg reads the address
    differently than `urlsplit` does, takes a part of the password for the host or the port, and quotes it in
    the error it raises — where chatgate, which knows the password by `urlsplit`'s reading, cannot mask it."""
    parts = urlsplit(url)
    if parts.scheme not in ("postgresql", "postgres") or not parts.hostname and "host=" not in parts.query \
            or not parts.path.strip("/"):
        return "must be postgresql://user[:password]@host[:port]/dbname"
    try:
        parts.port  # (a port that is not a number: a raw `/`, `?` or `#` cut the password there)
    except ValueError:
        return "must be postgresql://user[:password]@host[:port]/dbname, its port a number"
    if parts.netloc.count("@") > 1:
        return "must be postgresql://user[:password]@host[:port]/dbname, with one `@`: write a password's @ as %40"
    return None


class _Platforms(_Section):
    """`platforms:`; one section per platform package (see `platforms.registry`)."""

    def sections(self) -> dict[str, PlatformConfig]:
        return {name: getattr(self, name) for name in type(self).model_fields}

    def require_mention(self, platform: str, chat_id: str) -> bool:
        """Whether the bot answers in this group only when addressed."""
        section = getattr(self, platform, None)
        return section.require_mention_in(chat_id) if isinstance(section, PlatformConfig) else True


PlatformsConfig = create_model(  # type: ignore[call-overload]
    "PlatformsConfig", __base__=_Platforms,
    **{name: (spec.config, section()) for name, spec in specs().items()})


class AccessConfig(_Section):
    allowed_users: dict[str, list[str]] = {}
    admins: dict[str, list[str]] = {}
    dm_policy: Literal["pairing", "allowlist", "open"] = "pairing"
    # shared notes and skills written in conversations of people who are not admins: wait for an admin / allow
    untrusted_learning: Literal["quarantine", "allow"] = "quarantine"


@dataclass(frozen=True, slots=True)
class _Read:
    """What loading found besides the values: the files read through NAME_FILE variables, and where each key
    path was set."""

    secret_files: list[Path]
    origins: dict[tuple[str, ...], str]


class Config(BaseSettings):
    """The whole configuration; `load_config` reads it."""

    model_config = SettingsConfigDict(env_prefix="CHATGATE_", env_nested_delimiter="__", extra="forbid",
                                      defer_build=True)

    @classmethod
    def settings_customise_sources(
            cls, settings_cls: type[BaseSettings], init_settings: PydanticBaseSettingsSource,
            env_settings: PydanticBaseSettingsSource, dotenv_settings: PydanticBaseSettingsSource,
            file_secret_settings: PydanticBaseSettingsSource) -> tuple[PydanticBaseSettingsSource, ...]:
        """The sources `load_config` built, highest priority first (else keyword arguments and the environment)."""
        return _SOURCES.get(None) or (init_settings, env_settings)

    llm: LLMConfig = section()
    gateway: GatewayConfig = section()
    agent: AgentConfig = section()
    http: HttpConfig = section()
    storage: StorageConfig = section()
    platforms: PlatformsConfig = section()  # type: ignore[valid-type]
    access: AccessConfig = section()
    approvals: ApprovalsConfig = section()
    cron: CronConfig = section()
    review: ReviewConfig = section()
    compression: CompressionConfig = section()
    goals: GoalsConfig = section()
    board: BoardConfig = section()
    delegation: DelegationConfig = section()
    curator: CuratorConfig = section()
    trajectories: TrajectoriesConfig = section()

    _home: Path = PrivateAttr(default_factory=lambda: default_home())
    _file: Path | None = PrivateAttr(None)  # the one named with --config
    _read: _Read = PrivateAttr(default_factory=lambda: _Read([], {}))

    def origin(self, path: tuple[str, ...]) -> str:
        """Where the value at `path` came from: a variable (and the file it was read from), the
        config file, or the default (`chatgate config show --origin`)."""
        for length in range(len(path), 0, -1):  # (a variable may set a whole section as YAML)
            if (found := self._read.origins.get(path[:length])) is not None:
                return found
        return "default"

    @property
    def home(self) -> Path:
        return self._home

    @property
    def file(self) -> Path:
        """The config file: the one named with `--config`, else `$CHATGATE_HOME/config.yaml`."""
        return (self._file or self._home / "config.yaml").absolute()

    def adapters(self) -> list[PlatformAdapter]:
        """The adapters this configuration asks for; SDKs are imported only for those."""
        env = AdapterEnv(home=self.home, http_host=self.http.host, public_url=self.http.public_url,
                         max_message_chars=self.gateway.max_message_chars)
        return build(self.platforms.sections(), env)

    def private_paths(self) -> list[Path]:
        """What the agent's commands must neither see nor reach (resolved): the home, and the config
        file's folder — or only the file, when that folder holds the workspace or is shared with the
        rest of the system (`/`, `/etc`, `/usr/...`, the user's home); and the files secrets were read
        from (`NAME_FILE` variables)."""
        home, file = Path(os.path.realpath(self._home)), Path(os.path.realpath(self.file))
        if file.is_relative_to(home):
            return [home, *self._read.secret_files]
        folder, workspace = file.parent, Path(os.path.realpath(self.workspace))
        shared = len(folder.parts) <= 2 or folder.is_relative_to("/usr") or folder == Path.home().resolve() \
            or workspace.is_relative_to(folder)
        return [home, file if shared else folder, *self._read.secret_files]

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
        """SQLite's database file (when `storage.url` is unset)."""
        return self._home / "state.db"

    @property
    def database_url(self) -> str | None:
        """`storage.url`: the PostgreSQL database every instance shares; None: SQLite at `db_path`."""
        return self.storage.url.get_secret_value() if self.storage.url is not None else None

    @property
    def workspace(self) -> Path:
        return (self.agent.workspace or self._home / "workspace").expanduser()

    def secrets(self) -> list[str]:
        """Every secret value set in the configuration, and the web chat's token kept in its file (made at
        the first start: read here each time, so one made since is included), for redaction."""
        found: list[str] = [token] if (token := self._token_file()) else []

        def walk(node: Any) -> None:
            if isinstance(node, SecretStr):
                if node.get_secret_value():
                    found.append(node.get_secret_value())
            elif isinstance(node, BaseModel):
                for name in type(node).model_fields:
                    walk(getattr(node, name))
            elif isinstance(node, dict):
                for item in node.values():
                    walk(item)

        walk(self)
        if self.storage.url is not None and (password := urlsplit(self.storage.url.get_secret_value()).password):
            found += {password, unquote(password)}  # (alone too: a driver's error may name it without the rest of the
            # address; as the server knows it, too)
        return found


    def _token_file(self) -> str | None:
        """The web chat token kept in `$CHATGATE_HOME/webchat-token`: a regular file reached with no link,
        of a few bytes (read the way the web chat reads it, so a link or a FIFO there is not followed)."""
        from agent.safety.beneath import Beneath, Refused
        from platforms.webchat.access import TOKEN_FILE

        try:
            return Beneath(self._home).read(TOKEN_FILE, 4096).decode("utf-8", "replace").strip() or None
        except (OSError, Refused):
            return None


def default_home(env: Mapping[str, str] | None = None) -> Path:
    return home_from_env(env)


def _aliases() -> dict[str, tuple[str, ...]]:
    """Environment variable -> config path, used when the file leaves the key unset."""
    return {"OPENAI_BASE_URL": ("llm", "base_url"), "OPENAI_API_KEY": ("llm", "api_key"),
            "CHATGATE_MODEL": ("llm", "model"),
            **{var: ("platforms", name, key) for name, spec in specs().items() for var, key in spec.env.items()}}


def _secret_paths(model: type[BaseModel], prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """The config paths of every secret (`SecretStr`) setting."""
    found: list[tuple[str, ...]] = []
    for name, field in model.model_fields.items():
        kinds = (field.annotation, *get_args(field.annotation))
        if SecretStr in kinds:
            found.append((*prefix, name))
        found += [path for kind in kinds if isinstance(kind, type) and issubclass(kind, BaseModel)
                  for path in _secret_paths(kind, (*prefix, name))]
    return found


def secret_variables() -> list[str]:
    """The variables that may set a secret, each of which may instead name a file as `NAME_FILE`."""
    secret = _secret_paths(Config)
    prefix, delimiter = Config.model_config["env_prefix"], Config.model_config["env_nested_delimiter"]
    return [prefix + delimiter.join(path).upper() for path in secret] + \
        [var for var, path in _aliases().items() if path in secret]


def load_config(path: Path | str | None = None, env: Mapping[str, str] | None = None) -> Config:
    """Read, merge and validate the configuration; raise `ConfigError` on any problem. Priority:
    `CHATGATE_<SECTION>__<KEY>` variables, then the file, then the aliases (for what the file
    leaves unset or empty), then the defaults. The variables are the process's, over those of
    `$CHATGATE_HOME/env`, with secrets read from `NAME_FILE` files (gateway/config_env.py)."""
    env = os.environ if env is None else env
    home = default_home(env)
    read = read_environment(env, home, secret_variables())
    file = YamlFile(Config, Path(path).expanduser() if path else home / "config.yaml", required=bool(path))
    variables = Environment(Config, read.variables, file.data, read.described)
    aliases = EnvironmentAliases(Config, read.variables, file.data, _aliases(), read.described)
    reset = _SOURCES.set((variables, aliases, file))
    try:
        config = Config()
    except ValidationError as exc:
        raise ConfigError(describe(exc, Config, str(file.path), {**aliases.origins, **variables.origins},
                                   secret=_secret_paths(Config))) from None
    finally:
        _SOURCES.reset(reset)
    config._home = home
    config._file = file.path if path else None
    config._read = _Read(read.secret_files,
                         {**{key: str(file.path) for key in _leaves(file.data)}, **aliases.origins, **variables.origins})
    return config


def _leaves(data: Any, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every key path the file sets a value at."""
    if not isinstance(data, dict):
        return [path] if path else []
    return [leaf for key, value in data.items() for leaf in _leaves(value, (*path, str(key)))]
