"""Schedule expressions for jobs: parse them and work out when they next run.

Accepted forms (case-insensitive keywords, whitespace-tolerant)::

    every 30m | every 2h | every 1d | every 1h30m | every 90 minutes   repeating, elapsed time
    0 9 * * 1-5 | cron 0 9 * * 1-5                                     5-field cron, wall clock
    at 2026-11-22T10:00 | at 2026-11-22 10:00+01:00 | at 09:30          one-shot
    in 20m | tomorrow 9:00                                             one-shot, relative to `now`

``parse_schedule()`` returns a ``Schedule`` whose ``next_after()`` / ``first()`` return
timezone-aware UTC datetimes, and whose ``trigger()`` is the APScheduler 3.x trigger doing the
same computation (so a job store / scheduler and our own code agree on every fire time).

Semantics worth knowing
-----------------------
* ``every`` is elapsed time, not wall-clock time: ``every 1d`` is exactly 24 h, so across a
  DST change it drifts by an hour on the local clock. Use cron for "every day at 09:00".
  ``next_after(t)`` treats ``t`` as the previous fire time and returns ``t + interval``; pass
  the previous *scheduled* time (not the time the job finished) and no drift accumulates.
  ``first(now)`` is ``now + interval``. The minimum interval is 1 minute (``allow_seconds=True``
  lifts it, for tests); the maximum for any duration is 365 days.
* ``at`` / ``in`` / ``tomorrow`` are one-shots (kind ``"once"``, expression ``at <ISO time>``,
  seconds kept, microseconds dropped). ``first(now)`` is the time, or None if it is before
  `now`; ``next_after(t)`` is the time if it is after `t`, else None. A past time parses.
* cron uses standard (Vixie) crontab meaning, evaluated on the wall clock of the job's zone:
  - weekdays are 0-7 with 0 and 7 = Sunday, or names sun..sat. APScheduler 3.x's own
    ``CronTrigger.from_crontab`` numbers weekdays from 0 = Monday (its documented "historical
    mistake"), so ``1-5`` would mean Tue-Sat there; we translate the field to weekday *names*
    before handing it over.
  - when both day-of-month and day-of-week are restricted (neither starts with ``*``) a day
    matching *either* fires (``0 9 1 * 1`` = the 1st and every Monday); APScheduler alone would
    require both, so that case is an OR of two CronTriggers.
  - DST, spring forward (a local time that does not exist that day, e.g. 02:30 in Berlin on the
    last Sunday of March): the wall time is read with the offset in force *before* the change,
    as APScheduler 3.11's CronTrigger and zoneinfo (fold=0) do, so the job fires once, one
    hour "late" by the new clock (02:30 CET = 01:30 UTC = 03:30 CEST). Not lost, not doubled.
    One-shot ``at`` times in a gap are resolved the same way.
  - DST, fall back (a local time that happens twice): APScheduler 3.11 fires at *both*
    instants. We follow Vixie cron instead: a job with a fixed minute and hour (neither field
    starts with ``*``) fires once, at the first occurrence; jobs whose minute or hour field
    starts with ``*`` (``*/15 * * * *``, ``0 * * * *``) keep running on real time through the
    repeated hour. Ambiguous one-shot ``at`` times mean the first occurrence.
  - A plain CronTrigger on a DST zone also *loses* runs when its search steps across a change
    (see ``gateway.cron.wallclock``), so cron times are computed with CronTriggers on fixed UTC
    offsets, stitched at each change of offset. ``trigger()`` returns that wrapper, which is
    an APScheduler ``BaseTrigger`` and gives the same times as ``next_after``.
  - an expression that can never fire (``0 0 30 2 *``) is rejected.
* Time zone: the ``tz`` argument, else ``default_tz`` (``gateway.timezone`` in the config), else
  the system zone as tzlocal names it (``$TZ``, then the system's configuration: the
  ``/etc/localtime`` symlink, ``/etc/timezone``…; read once per process), else UTC.
  (``datetime.now().astimezone().tzinfo`` is not used: it is a fixed UTC offset with no DST
  rules and no IANA name.) Zones come from ``zoneinfo``, i.e. the system tz database (or the
  ``tzdata`` package if installed).
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from datetime import date, datetime, timedelta, timezone
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import tzlocal
from apscheduler.triggers.base import BaseTrigger
from apscheduler.triggers.date import DateTrigger
from apscheduler.triggers.interval import IntervalTrigger

from gateway.cron.wallclock import WallClockCronTrigger

__all__ = [
    "CronSchedule",
    "EverySchedule",
    "OnceSchedule",
    "Schedule",
    "ScheduleError",
    "local_timezone_name",
    "parse_schedule",
    "resolve_timezone",
]

UTC = timezone.utc
MIN_INTERVAL = timedelta(minutes=1)
MAX_DURATION = timedelta(days=365)
_TICK = timedelta(microseconds=1)


class ScheduleError(ValueError):
    """A schedule expression or time zone the user gave cannot be used. The message is one line."""


def _quote(text: str, limit: int = 60) -> str:
    text = " ".join(str(text).split())
    return repr(text if len(text) <= limit else text[: limit - 1] + "…")


def _require_aware(dt: datetime, name: str) -> datetime:
    if not isinstance(dt, datetime) or dt.tzinfo is None or dt.utcoffset() is None:
        raise ValueError(f"{name} must be a timezone-aware datetime, got {dt!r}")
    return dt


# --------------------------------------------------------------------------- time zones


def _valid_zone(name: str | None) -> str | None:
    if not name:
        return None
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        return None
    return name


def local_timezone_name() -> str:
    """IANA name of the system zone (tzlocal's answer), or UTC when it names none or a wrong one."""
    try:
        return _valid_zone(tzlocal.get_localzone_name()) or "UTC"
    except ZoneInfoNotFoundError:  # (configurations that disagree: tzlocal will not choose)
        return "UTC"


def resolve_timezone(tz: str | None = None, default_tz: str | None = None) -> tuple[str, ZoneInfo]:
    """The (name, zone) to use: `tz`, else `default_tz`, else the system zone."""
    name = tz or default_tz or local_timezone_name()
    if not isinstance(name, str):
        raise ScheduleError(f"time zone must be an IANA name like 'Europe/Berlin', got {name!r}")
    try:
        return name, ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise ScheduleError(
            f"unknown time zone {_quote(name)}; use an IANA name like 'Europe/Berlin' or 'UTC'"
        ) from None


# --------------------------------------------------------------------------- durations

_UNITS = {
    "s": 1, "sec": 1, "secs": 1, "second": 1, "seconds": 1,
    "m": 60, "min": 60, "mins": 60, "minute": 60, "minutes": 60,
    "h": 3600, "hr": 3600, "hrs": 3600, "hour": 3600, "hours": 3600,
    "d": 86400, "day": 86400, "days": 86400,
}
_DURATION_PART = re.compile(r"\s*(\d{1,9})\s*([a-z]+)\s*")
_UNIT_NAMES = (("d", "day", 86400), ("h", "hour", 3600), ("m", "minute", 60), ("s", "second", 1))


def _parse_duration(text: str) -> timedelta:
    src = text.strip().lower()
    if not src:
        raise ScheduleError("missing duration; use e.g. 30m, 2h, 1d or 1h30m")
    if src.isdigit():
        raise ScheduleError(f"missing unit in {_quote(text)}; use e.g. {src}m (s, m, h or d)")
    seconds, pos = 0, 0
    while pos < len(src):
        m = _DURATION_PART.match(src, pos)
        if not m:
            raise ScheduleError(f"can't read duration {_quote(text)}; use e.g. 30m, 2h, 1d or 1h30m")
        unit = _UNITS.get(m.group(2))
        if unit is None:
            raise ScheduleError(f"unknown unit {m.group(2)!r} in {_quote(text)}; use s, m, h or d")
        seconds += int(m.group(1)) * unit
        pos = m.end()
    if seconds <= 0:
        raise ScheduleError(f"duration {_quote(text)} must be greater than zero")
    if seconds > MAX_DURATION.total_seconds():
        raise ScheduleError(f"duration {_quote(text)} is too long (maximum 365d)")
    return timedelta(seconds=seconds)


def _split_seconds(total: int) -> list[tuple[int, str, str]]:
    parts = []
    for short, long, size in _UNIT_NAMES:
        n, total = divmod(total, size)
        if n:
            parts.append((n, short, long))
    return parts


def _format_duration(delta: timedelta) -> str:
    return "".join(f"{n}{short}" for n, short, _ in _split_seconds(int(delta.total_seconds())))


def _describe_duration(delta: timedelta) -> str:
    parts = _split_seconds(int(delta.total_seconds()))
    if len(parts) == 1 and parts[0][0] == 1:
        return parts[0][2]
    return " ".join(f"{n} {long}{'' if n == 1 else 's'}" for n, _, long in parts)


# --------------------------------------------------------------------------- schedules


class Schedule(ABC):
    """A parsed schedule. All datetimes returned are timezone-aware UTC."""

    kind: str
    expression: str  # normalised text; parse_schedule(expression, tz=timezone) gives it back
    timezone: str  # IANA name

    def __init__(self, expression: str, tz_name: str, zone: ZoneInfo) -> None:
        self.expression = expression
        self.timezone = tz_name
        self.zone = zone

    @abstractmethod
    def next_after(self, after: datetime) -> datetime | None:
        """The next fire time strictly after `after`, or None if there is none."""

    @abstractmethod
    def first(self, now: datetime) -> datetime | None:
        """The first fire time of a job created at `now`."""

    @abstractmethod
    def trigger(self) -> BaseTrigger:
        """An APScheduler 3.x trigger that fires at the same times."""

    @abstractmethod
    def describe(self) -> str:
        """A short human description."""

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.expression!r} tz={self.timezone!r}>"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Schedule):
            return NotImplemented
        return (self.kind, self.expression, self.timezone) == (other.kind, other.expression, other.timezone)

    def __hash__(self) -> int:
        return hash((self.kind, self.expression, self.timezone))


class EverySchedule(Schedule):
    kind = "every"

    def __init__(self, interval: timedelta, tz_name: str, zone: ZoneInfo, created: datetime) -> None:
        super().__init__(f"every {_format_duration(interval)}", tz_name, zone)
        self.interval = interval
        self.created = created.astimezone(UTC)

    def next_after(self, after: datetime) -> datetime | None:
        return _require_aware(after, "after").astimezone(UTC) + self.interval

    def first(self, now: datetime) -> datetime | None:
        return _require_aware(now, "now").astimezone(UTC) + self.interval

    def trigger(self) -> IntervalTrigger:
        return IntervalTrigger(seconds=int(self.interval.total_seconds()),
                               start_date=self.created + self.interval, timezone=self.zone)

    def describe(self) -> str:
        return f"every {_describe_duration(self.interval)}"


class OnceSchedule(Schedule):
    kind = "once"

    def __init__(self, at: datetime, tz_name: str, zone: ZoneInfo) -> None:
        at = at.replace(microsecond=0)
        super().__init__(f"at {at.astimezone(zone).isoformat()}", tz_name, zone)
        self.at = at.astimezone(UTC)

    def next_after(self, after: datetime) -> datetime | None:
        return self.at if self.at > _require_aware(after, "after") else None

    def first(self, now: datetime) -> datetime | None:
        return self.at if self.at >= _require_aware(now, "now") else None

    def trigger(self) -> DateTrigger:
        return DateTrigger(run_date=self.at.astimezone(self.zone), timezone=self.zone)

    def describe(self) -> str:
        local = self.at.astimezone(self.zone)
        shown = local.strftime("%Y-%m-%d %H:%M:%S" if local.second else "%Y-%m-%d %H:%M")
        return f"once at {shown} {local.tzname()}"


# --------------------------------------------------------------------------- cron

_DOW_NAMES = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"]
_MONTH_NAMES = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"]
# (label, min, max, names -> value)
_CRON_FIELDS = (
    ("minute", 0, 59, {}),
    ("hour", 0, 23, {}),
    ("day-of-month", 1, 31, {}),
    ("month", 1, 12, {n: i + 1 for i, n in enumerate(_MONTH_NAMES)}),
    ("day-of-week", 0, 7, {n: i for i, n in enumerate(_DOW_NAMES)}),
)
_CRON_ITEM = re.compile(r"(?:(\*)|([0-9a-z]+)(?:-([0-9a-z]+))?)(?:/(\d+))?")
_DAYS_IN_MONTH = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)  # Feb 29 happens


def _expand_field(text: str, label: str, lo: int, hi: int, names: dict[str, int]) -> frozenset[int]:
    def value(token: str) -> int:
        if token.isdigit():
            v = int(token)
            if not lo <= v <= hi:
                raise ScheduleError(f"cron {label} value {v} is out of range {lo}-{hi}")
            return v
        if token in names:
            return names[token]
        raise ScheduleError(f"bad cron {label} value {token!r}")

    values: set[int] = set()
    for item in text.split(","):
        m = _CRON_ITEM.fullmatch(item)
        if not m:
            raise ScheduleError(f"bad cron {label} field {text!r}")
        star, first, last, step_text = m.groups()
        if star:
            start, end = lo, (6 if label == "day-of-week" else hi)
        else:
            start = value(first)
            end = value(last) if last else (hi if step_text else start)
            if label == "day-of-week" and last and end == 0 and start > 0:
                end = 7  # "fri-sun", "5-0": Sunday closes the range
        if start > end:
            raise ScheduleError(f"backwards range {item!r} in cron {label} field")
        step = int(step_text) if step_text else 1
        if step < 1:
            raise ScheduleError(f"cron {label} step must be at least 1, got {step_text!r}")
        if step > hi - lo:
            raise ScheduleError(f"cron {label} step {step} is too large (the range is {lo}-{hi})")
        values.update(range(start, end + 1, step))
    if label == "day-of-week":
        values = {v % 7 for v in values}
    return frozenset(values)


def _runs(values: list[int]) -> list[tuple[int, int]]:
    """Consecutive runs in an ordered list: [1,2,3,5] -> [(1,3),(5,5)]."""
    runs: list[tuple[int, int]] = []
    for v in values:
        if runs and v == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], v)
        else:
            runs.append((v, v))
    return runs


def _aps_field(values: frozenset[int], lo: int, hi: int) -> str:
    if values == frozenset(range(lo, hi + 1)):
        return "*"
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in _runs(sorted(values)))


def _aps_weekdays(days: frozenset[int]) -> str:
    """Cron weekdays (0 = Sunday) as APScheduler weekday names, Monday first."""
    if len(days) == 7:
        return "*"
    order = sorted((d - 1) % 7 for d in days)  # 0 = Monday, APScheduler's numbering
    aps = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"]
    return ",".join(aps[a] if a == b else f"{aps[a]}-{aps[b]}" for a, b in _runs(order))


class CronSchedule(Schedule):
    kind = "cron"

    def __init__(self, fields: list[str], tz_name: str, zone: ZoneInfo) -> None:
        super().__init__("cron " + " ".join(fields), tz_name, zone)
        self.fields = fields
        sets = [_expand_field(text, *spec) for text, spec in zip(fields, _CRON_FIELDS)]
        self.minutes, self.hours, self.days, self.months, self.weekdays = sets
        self.day_restricted = not fields[2].startswith("*")
        self.weekday_restricted = not fields[4].startswith("*")
        self.either_day = self.day_restricted and self.weekday_restricted
        if not self.either_day and not any(
            d <= _DAYS_IN_MONTH[m - 1] for m in self.months for d in self.days
        ):
            raise ScheduleError(f"cron {_quote(' '.join(fields))} never fires: no such day in those months")
        minute, hour = _aps_field(self.minutes, 0, 59), _aps_field(self.hours, 0, 23)
        day, month = _aps_field(self.days, 1, 31), _aps_field(self.months, 1, 12)
        weekday = _aps_weekdays(self.weekdays)
        if self.either_day:
            specs = [f"{minute} {hour} {day} {month} *", f"{minute} {hour} * {month} {weekday}"]
        else:
            specs = [f"{minute} {hour} {day} {month} {weekday}"]
        # Vixie cron: a job whose minute or hour starts with "*" follows real time through a
        # repeated hour; any other job runs once per wall-clock time.
        fixed_time = not (fields[0].startswith("*") or fields[1].startswith("*"))
        try:
            self._trigger = WallClockCronTrigger(specs, zone, once_per_wall_time=fixed_time)
        except ValueError as exc:  # pragma: no cover - our own validation is stricter
            raise ScheduleError(f"bad cron expression {_quote(' '.join(fields))}: {exc}") from None

    def next_after(self, after: datetime) -> datetime | None:
        return self._trigger.next_at_or_after(_require_aware(after, "after").astimezone(UTC) + _TICK)

    def first(self, now: datetime) -> datetime | None:
        return self._trigger.next_at_or_after(_require_aware(now, "now"))

    def trigger(self) -> WallClockCronTrigger:
        return self._trigger

    def describe(self) -> str:
        parts = [self._describe_time(), self._describe_days(), self._describe_months()]
        if parts[0] is None or parts[1] is None:
            return f"cron {' '.join(self.fields)} ({self.timezone})"
        if parts[0].startswith("every") and parts[1] == "every day":
            parts[1] = ""
        return " ".join(p for p in parts if p) + f" ({self.timezone})"

    def _describe_time(self) -> str | None:
        minutes, hours = sorted(self.minutes), sorted(self.hours)
        if len(minutes) * len(hours) <= 4:
            times = [f"{h:02d}:{m:02d}" for h in hours for m in minutes]
            return "at " + (times[0] if len(times) == 1 else ", ".join(times[:-1]) + " and " + times[-1])
        if len(hours) == 24:
            if len(minutes) == 60:
                return "every minute"
            if len(minutes) == 1:
                return f"every hour at :{minutes[0]:02d}"
            step = minutes[1] - minutes[0]
            if minutes == list(range(0, 60, step)) and 60 % step == 0:
                return f"every {step} minutes"
        return None

    def _describe_days(self) -> str | None:
        names = [n.capitalize() for n in _DOW_NAMES]
        runs = _runs(sorted((d - 1) % 7 for d in self.weekdays))  # Monday first
        weekday_text = ", ".join(
            names[(a + 1) % 7] if a == b else
            f"{names[(a + 1) % 7]}, {names[(b + 1) % 7]}" if b == a + 1 else
            f"{names[(a + 1) % 7]}–{names[(b + 1) % 7]}"
            for a, b in runs
        )
        days = sorted(self.days)
        day_text = (f"day {days[0]}" if len(days) == 1 else "days " + ", ".join(map(str, days))) + " of the month"
        all_days, all_weekdays = len(days) == 31, len(self.weekdays) == 7
        if self.either_day:
            return f"on {day_text} and on {weekday_text}"
        if all_days and all_weekdays:
            return "every day"
        if all_days:
            return f"on {weekday_text}"
        if all_weekdays:
            return f"on {day_text}"
        return None  # day-of-month AND weekday: rare, leave it to the raw expression

    def _describe_months(self) -> str:
        if len(self.months) == 12:
            return ""
        names = [n.capitalize() for n in _MONTH_NAMES]
        return "in " + ", ".join(
            names[a - 1] if a == b else f"{names[a - 1]}–{names[b - 1]}" for a, b in _runs(sorted(self.months))
        )


# --------------------------------------------------------------------------- parsing

_CLOCK = re.compile(r"(\d{1,2}):(\d{2})(?::(\d{2}))?")
_CRONISH = re.compile(r"[0-9*][0-9a-z*/,\-]*")
_HELP = "use 'every 30m', a 5-field cron like '0 9 * * 1-5', 'at 2026-11-22T10:00' or 'in 20m'"


def _local(naive: datetime, zone: ZoneInfo) -> datetime:
    """Attach `zone` to a naive wall time: ambiguous -> first occurrence; nonexistent -> the
    offset before the change (as APScheduler does), i.e. an hour later on the new clock."""
    return naive.replace(tzinfo=zone, fold=0).astimezone(UTC)


def _clock(text: str) -> tuple[int, int, int] | None:
    m = _CLOCK.fullmatch(text)
    if not m:
        return None
    h, mi, s = int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)
    if h > 23 or mi > 59 or s > 59:
        raise ScheduleError(f"bad time of day {_quote(text)}; use HH:MM, 00:00-23:59")
    return h, mi, s


def _at_clock(day: date, hms: tuple[int, int, int], zone: ZoneInfo) -> datetime:
    return _local(datetime(day.year, day.month, day.day, *hms), zone)


def parse_schedule(text: str, tz: str | None = None, now: datetime | None = None, *,
                   default_tz: str | None = None, allow_seconds: bool = False) -> Schedule:
    """Parse a schedule expression. Raises ScheduleError (one-line message) on bad input.

    `tz` is the job's IANA zone (else `default_tz`, else the system zone); `now` (aware,
    default: the current time) anchors relative forms ("in 20m", "at 09:30", "every 30m").
    """
    if not isinstance(text, str) or not text.strip():
        raise ScheduleError(f"empty schedule; {_HELP}")
    now = datetime.now(UTC) if now is None else _require_aware(now, "now").astimezone(UTC)
    tz_name, zone = resolve_timezone(tz, default_tz)
    words = text.split()
    head, rest = words[0].lower(), " ".join(words[1:])

    if head == "every":
        interval = _parse_duration(rest)
        if interval < MIN_INTERVAL and not allow_seconds:
            raise ScheduleError(f"interval {_format_duration(interval)} is too short; the minimum is 1m")
        return EverySchedule(interval, tz_name, zone, now)

    if head == "in":
        return OnceSchedule(now + _parse_duration(rest), tz_name, zone)

    if head == "tomorrow":
        spec = rest[3:].strip() if rest.lower().startswith("at ") else rest
        hms = _clock(spec)
        if hms is None:
            raise ScheduleError(f"can't read time {_quote(spec)}; use e.g. 'tomorrow 9:00'")
        today = now.astimezone(zone).date()
        return OnceSchedule(_at_clock(today + timedelta(days=1), hms, zone), tz_name, zone)

    if head == "at":
        if not rest:
            raise ScheduleError("missing time after 'at'; use e.g. 'at 2026-11-22T10:00' or 'at 09:30'")
        hms = _clock(rest)
        if hms is not None:  # next occurrence of that wall time
            today = now.astimezone(zone).date()
            when = _at_clock(today, hms, zone)
            if when <= now:
                when = _at_clock(today + timedelta(days=1), hms, zone)
            return OnceSchedule(when, tz_name, zone)
        try:
            when = datetime.fromisoformat(rest)
        except ValueError:
            raise ScheduleError(
                f"can't read time {_quote(rest)}; use ISO like 2026-11-22T10:00 or 2026-11-22T10:00+01:00"
            ) from None
        when = _local(when, zone) if when.tzinfo is None else when.astimezone(UTC)
        return OnceSchedule(when, tz_name, zone)

    if head != "cron":
        try:
            _parse_duration(text)
        except ScheduleError:
            pass
        else:
            bare = " ".join(words)
            raise ScheduleError(f"{_quote(bare)} is a duration; did you mean 'every {bare}' or 'in {bare}'?")

    fields = words[1:] if head == "cron" else words
    if head == "cron" or _CRONISH.fullmatch(words[0].lower()):
        if len(fields) != 5:
            raise ScheduleError(
                f"cron expression needs 5 fields (minute hour day-of-month month day-of-week), got {len(fields)}"
            )
        return CronSchedule([f.lower() for f in fields], tz_name, zone)

    raise ScheduleError(f"can't understand schedule {_quote(text)}; {_HELP}")
