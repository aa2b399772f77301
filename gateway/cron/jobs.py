"""Scheduled jobs: what to run, when, for whom, and where the result goes.

The CLI, the chat command, the agent's `cron` tool and the scheduler all change jobs through
this module, so they agree on every rule (schedules are validated here, the next run time is
computed here); `gateway.storage.cron` keeps them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Mapping

from gateway.storage.cron import CronStore
from platforms.base import ChatRef

if TYPE_CHECKING:  # (parsing schedules needs APScheduler: imported when a schedule is parsed)
    from gateway.cron.expressions import Schedule

MISSED_POLICIES = ("run_once", "skip")
NAME_LIMIT = 80
PROMPT_LIMIT = 4000


class CronError(ValueError):
    """A request about jobs that cannot be done; the message says why, in one line."""


OPERATOR = ("cli", "operator")  # the owner of the jobs `chatgate cron add` makes


def parse_target(text: str) -> ChatRef | None:
    """`platform:chat[:thread]` → ChatRef; `none` → None."""
    text = text.strip()
    if text.lower() == "none":
        return None
    parts = text.split(":")
    if len(parts) not in (2, 3) or not all(p.strip() for p in parts):
        raise CronError(f"delivery target {text!r} must be platform:chat, platform:chat:thread or none")
    return ChatRef(parts[0].strip(), parts[1].strip(), parts[2].strip() if len(parts) == 3 else None)


def format_target(chat: ChatRef | None) -> str:
    if chat is None:
        return "none"
    return f"{chat.platform}:{chat.chat_id}" + (f":{chat.thread_id}" if chat.thread_id else "")


def utc(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, UTC)


@dataclass(frozen=True, slots=True)
class Job:
    id: int
    name: str
    prompt: str
    schedule: str
    timezone: str
    target: str
    owner_platform: str
    owner_id: str
    owner_chat: str | None
    owner_key: str | None
    enabled: bool
    missed_policy: str
    next_run_at: float | None
    last_run_at: float | None
    last_status: str | None
    last_error: str | None
    model: str | None  # the model its runs use (None: the main one)

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> "Job":
        return cls(**{name: row[name] for name in cls.__slots__ if name != "enabled"}, enabled=bool(row["enabled"]))

    def parsed(self) -> Schedule:
        from gateway.cron.expressions import parse_schedule

        return parse_schedule(self.schedule, self.timezone, allow_seconds=True)

    @property
    def target_chat(self) -> ChatRef | None:
        return parse_target(self.target)

    @property
    def owner_chat_ref(self) -> ChatRef | None:
        return parse_target(self.owner_chat) if self.owner_chat else None

    @property
    def by_operator(self) -> bool:
        """Made by the machine's operator (`chatgate cron add`), not by a person in a chat."""
        return (self.owner_platform, self.owner_id) == OPERATOR

    @property
    def state(self) -> str:
        if not self.enabled:
            return "paused"
        return "active" if self.next_run_at is not None else "finished"

    def describe(self) -> str:
        """One line for listings: id, name, schedule, state, next and last run."""
        from gateway.cron.expressions import ScheduleError

        try:
            when = self.parsed().describe()
        except ScheduleError:
            when = self.schedule
        parts = [f"#{self.id} {self.name} — {when}, {self.state}"]
        if self.enabled and self.next_run_at is not None:
            parts.append(f"next {_local(self.next_run_at, self.timezone)}")
        if self.last_status:
            parts.append(f"last {self.last_status}" + (f" at {_local(self.last_run_at, self.timezone)}"
                                                       if self.last_run_at else ""))
        parts.append(f"→ {self.target}" + (f", model {self.model}" if self.model else ""))
        return ", ".join(parts)


def _model(name: str | None) -> str | None:
    """A model name as given (None or blank: the main model)."""
    name = (name or "").strip()
    if len(name) > 200 or any(c.isspace() for c in name):
        raise CronError("a model is a name such as gpt-4o-mini (no spaces, at most 200 characters)")
    return name or None


def _local(ts: float | None, zone: str) -> str:
    if ts is None:
        return "-"
    from zoneinfo import ZoneInfo

    return utc(ts).astimezone(ZoneInfo(zone)).strftime("%Y-%m-%d %H:%M:%S %Z")


class CronJobs:
    """Jobs in the store. `default_tz` is `gateway.timezone`; `min_interval` limits `every`."""

    def __init__(self, cron: CronStore, *, default_tz: str | None = None, min_interval: float = 60.0) -> None:
        self.cron = cron
        self.default_tz = default_tz
        self.min_interval = min_interval

    def check_schedule(self, text: str, tz: str | None, now: float) -> Schedule:
        from gateway.cron.expressions import EverySchedule, ScheduleError, parse_schedule

        try:
            schedule = parse_schedule(text, tz, utc(now), default_tz=self.default_tz, allow_seconds=True)
        except ScheduleError as exc:
            raise CronError(str(exc)) from None
        if isinstance(schedule, EverySchedule) and schedule.interval.total_seconds() < self.min_interval:
            raise CronError(f"'{text.strip()}' is too frequent; the shortest interval is {self.min_interval:g}s "
                            "(cron.min_interval_seconds)")
        if schedule.first(utc(now)) is None:
            raise CronError(f"'{text.strip()}' is in the past; give a future time")
        return schedule

    @staticmethod
    def _check_text(name: str, prompt: str) -> None:
        if not name.strip() or len(name) > NAME_LIMIT:
            raise CronError(f"a job needs a name of 1 to {NAME_LIMIT} characters")
        if not prompt.strip() or len(prompt) > PROMPT_LIMIT:
            raise CronError(f"a job needs a prompt of 1 to {PROMPT_LIMIT} characters")

    async def create(self, *, name: str, prompt: str, schedule: str, owner_platform: str, owner_id: str,
                     target: str, owner_chat: str | None = None, owner_key: str | None = None,
                     timezone: str | None = None, missed_policy: str = "run_once", model: str | None = None) -> Job:
        """Validate and store a new job; `target` is `platform:chat[:thread]` or `none`."""
        now = time.time()
        self._check_text(name, prompt)
        parsed = self.check_schedule(schedule, timezone, now)
        chat = parse_target(target)
        if missed_policy not in MISSED_POLICIES:
            raise CronError(f"missed-run policy must be one of {', '.join(MISSED_POLICIES)}")
        first = parsed.first(utc(now))
        job_id = await self.cron.add_job(
            name=name.strip(), prompt=prompt.strip(), schedule=parsed.expression, timezone=parsed.timezone,
            target=format_target(chat), owner_platform=owner_platform, owner_id=owner_id, owner_chat=owner_chat,
            owner_key=owner_key, missed_policy=missed_policy, next_run_at=first.timestamp() if first else None,
            model=_model(model), now=now)
        job = await self.get(job_id)
        assert job is not None
        return job

    async def get(self, job_id: int) -> Job | None:
        row = await self.cron.job(job_id)
        return Job.from_row(row) if row else None

    async def find(self, ref: str, *, owner: tuple[str, str] | None = None) -> Job:
        """A job by id (`3` or `#3`) or by exact name, limited to `owner`'s jobs when given."""
        ref = ref.strip().lstrip("#")
        jobs = await self.list(owner=owner)
        found = [j for j in jobs if str(j.id) == ref] or [j for j in jobs if j.name.lower() == ref.lower()]
        if not found:
            raise CronError(f"no job {ref!r}" + (" of yours" if owner else ""))
        if len(found) > 1:
            raise CronError(f"{len(found)} jobs are called {ref!r}; use the job's number")
        return found[0]

    async def list(self, *, owner: tuple[str, str] | None = None) -> list[Job]:
        return [Job.from_row(r) for r in await self.cron.jobs(owner)]

    async def update(self, job_id: int, *, name: str | None = None, prompt: str | None = None,
                     schedule: str | None = None, timezone: str | None = None, target: str | None = None,
                     missed_policy: str | None = None, model: str | None = None) -> Job:
        """Change a job; a new schedule or zone restarts its timing from now; model "" is the main one."""
        job = await self.get(job_id)
        if job is None:
            raise CronError(f"no job #{job_id}")
        now = time.time()
        self._check_text(name if name is not None else job.name, prompt if prompt is not None else job.prompt)
        changes: dict[str, Any] = {}
        if name is not None:
            changes["name"] = name.strip()
        if prompt is not None:
            changes["prompt"] = prompt.strip()
        if target is not None:
            changes["target"] = format_target(parse_target(target))
        if model is not None:
            changes["model"] = _model(model)
        if missed_policy is not None:
            if missed_policy not in MISSED_POLICIES:
                raise CronError(f"missed-run policy must be one of {', '.join(MISSED_POLICIES)}")
            changes["missed_policy"] = missed_policy
        if schedule is not None or timezone is not None:
            parsed = self.check_schedule(schedule or job.schedule, timezone or job.timezone, now)
            first = parsed.first(utc(now))
            changes.update(schedule=parsed.expression, timezone=parsed.timezone,
                           next_run_at=first.timestamp() if first else None)
        if changes:
            await self.cron.change_job(job_id, changes, now)
        updated = await self.get(job_id)
        assert updated is not None
        return updated

    async def set_enabled(self, job_id: int, enabled: bool) -> Job:
        """Pause, or resume from now on (slots that passed while paused are not run)."""
        job = await self.get(job_id)
        if job is None:
            raise CronError(f"no job #{job_id}")
        changes: dict[str, Any] = {"enabled": int(enabled)}
        if enabled and not job.enabled:
            upcoming = job.parsed().first(utc(time.time()))
            changes["next_run_at"] = upcoming.timestamp() if upcoming else None
        await self.cron.change_job(job_id, changes, time.time())
        updated = await self.get(job_id)
        assert updated is not None
        return updated
