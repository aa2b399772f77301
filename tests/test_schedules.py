"""Unit tests for gateway/schedules.py: parsing, next-run computation, DST, descriptions.

No clock and no sleeping: every test passes a fixed `now` / `after`.

DST dates used (2026):
  Europe/Berlin     spring forward Sun 29 Mar at 01:00 UTC (02:00 CET -> 03:00 CEST)
                    fall back      Sun 25 Oct at 01:00 UTC (03:00 CEST -> 02:00 CET)
  America/New_York  spring forward Sun  8 Mar at 07:00 UTC (02:00 EST -> 03:00 EDT)
                    fall back      Sun  1 Nov at 06:00 UTC (02:00 EDT -> 01:00 EST)
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest
from apscheduler.triggers.cron import CronTrigger
from apscheduler.triggers.date import DateTrigger
from apscheduler.triggers.interval import IntervalTrigger

from gateway.cron.expressions import CronSchedule, ScheduleError, local_timezone_name, parse_schedule

UTC = timezone.utc
BERLIN = "Europe/Berlin"
NEW_YORK = "America/New_York"
NOW = datetime(2026, 6, 1, 6, 0, tzinfo=UTC)  # Monday 1 June 2026, 08:00 in Berlin


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


def run_times(schedule, after: datetime, count: int) -> list[datetime]:
    """The next `count` fire times after `after`, chaining next_after."""
    out = []
    for _ in range(count):
        after = schedule.next_after(after)
        assert after is not None
        out.append(after)
    return out


def chained_trigger_times(trigger, now: datetime, count: int) -> list[datetime]:
    """Fire times the way APScheduler's scheduler asks a trigger for them."""
    out, previous = [], None
    for _ in range(count):
        previous = trigger.get_next_fire_time(previous, now)
        assert previous is not None
        now = previous
        out.append(previous.astimezone(UTC))
    return out


# --------------------------------------------------------------------------- parsing


@pytest.mark.parametrize(
    ("text", "expression", "seconds"),
    [
        ("every 30m", "every 30m", 1800),
        ("every 2h", "every 2h", 7200),
        ("every 1d", "every 1d", 86400),
        ("every 1h30m", "every 1h30m", 5400),
        ("EVERY 90 minutes", "every 1h30m", 5400),
        ("every 1h 15min", "every 1h15m", 4500),
        ("every 24h", "every 1d", 86400),
        ("  every   2 hours ", "every 2h", 7200),
    ],
)
def test_parse_every(text: str, expression: str, seconds: int) -> None:
    s = parse_schedule(text, tz=BERLIN, now=NOW)
    assert (s.kind, s.expression, s.timezone) == ("every", expression, BERLIN)
    assert s.interval == timedelta(seconds=seconds)


def test_every_seconds_need_allow_seconds() -> None:
    with pytest.raises(ScheduleError, match="too short; the minimum is 1m"):
        parse_schedule("every 45s", tz="UTC", now=NOW)
    s = parse_schedule("every 45s", tz="UTC", now=NOW, allow_seconds=True)
    assert s.expression == "every 45s"
    assert s.first(NOW) == utc(2026, 6, 1, 6, 0, 45)
    # 90 seconds is over the minimum, seconds or not
    assert parse_schedule("every 90s", tz="UTC", now=NOW).expression == "every 1m30s"


@pytest.mark.parametrize(
    ("text", "expression"),
    [
        ("0 9 * * 1-5", "cron 0 9 * * 1-5"),
        ("cron 0 9 * * 1-5", "cron 0 9 * * 1-5"),
        ("CRON  0  9 * *  MON-FRI", "cron 0 9 * * mon-fri"),
        ("*/15 * * * *", "cron */15 * * * *"),
        ("0 0 1 jan *", "cron 0 0 1 jan *"),
    ],
)
def test_parse_cron(text: str, expression: str) -> None:
    s = parse_schedule(text, tz=BERLIN, now=NOW)
    assert (s.kind, s.expression, s.timezone) == ("cron", expression, BERLIN)


def test_parse_at_iso_naive_is_in_the_jobs_zone() -> None:
    s = parse_schedule("at 2026-11-22T10:00", tz=BERLIN, now=NOW)
    assert (s.kind, s.expression) == ("once", "at 2026-11-22T10:00:00+01:00")
    assert s.first(NOW) == utc(2026, 11, 22, 9, 0)
    ny = parse_schedule("at 2026-11-22 10:00", tz=NEW_YORK, now=NOW)
    assert ny.first(NOW) == utc(2026, 11, 22, 15, 0)


def test_parse_at_iso_with_offset_keeps_the_instant() -> None:
    s = parse_schedule("at 2026-11-22T10:00:00Z", tz=BERLIN, now=NOW)
    assert s.expression == "at 2026-11-22T11:00:00+01:00"  # shown in the job's zone
    assert s.first(NOW) == utc(2026, 11, 22, 10, 0)
    s = parse_schedule("at 2026-07-01T12:00-04:00", tz=BERLIN, now=NOW)
    assert s.first(NOW) == utc(2026, 7, 1, 16, 0)


def test_in_20m_is_relative_to_now() -> None:
    now = utc(2026, 11, 22, 8, 40, 0)
    s = parse_schedule("in 20m", tz=BERLIN, now=now)
    assert s.kind == "once"
    assert s.expression == "at 2026-11-22T10:00:00+01:00"
    assert s.first(now) == utc(2026, 11, 22, 9, 0)
    assert s.next_after(now) == utc(2026, 11, 22, 9, 0)
    assert s.next_after(utc(2026, 11, 22, 9, 0)) is None
    assert s.describe() == "once at 2026-11-22 10:00 CET"
    # seconds are allowed for one-shots; sub-second parts of `now` are dropped
    s = parse_schedule("in 1h 30s", tz="UTC", now=now.replace(microsecond=250_000))
    assert s.first(now) == utc(2026, 11, 22, 9, 40, 30)


def test_at_clock_time_is_the_next_occurrence() -> None:
    # NOW is 08:00 CEST
    assert parse_schedule("at 09:30", tz=BERLIN, now=NOW).first(NOW) == utc(2026, 6, 1, 7, 30)
    later = utc(2026, 6, 1, 8, 0)  # 10:00 CEST: 09:30 has passed, so tomorrow
    assert parse_schedule("at 9:30", tz=BERLIN, now=later).first(later) == utc(2026, 6, 2, 7, 30)


def test_tomorrow_uses_the_local_date() -> None:
    # 02:30 UTC on 1 June is still 31 May (22:30) in New York
    now = utc(2026, 6, 1, 2, 30)
    s = parse_schedule("tomorrow 9:00", tz=NEW_YORK, now=now)
    assert s.expression == "at 2026-06-01T09:00:00-04:00"
    assert parse_schedule("tomorrow at 09:00", tz=NEW_YORK, now=now) == s


def test_past_at_time_is_accepted_but_never_fires() -> None:
    s = parse_schedule("at 2020-01-01T00:00", tz=BERLIN, now=NOW)
    assert s.kind == "once"
    assert s.next_after(NOW) is None
    assert s.first(NOW) is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty schedule"),
        ("   ", "empty schedule"),
        ("every 30x", "unknown unit 'x'"),
        ("every 3 fortnights", "unknown unit 'fortnights'"),
        ("every 0m", "must be greater than zero"),
        ("every 0h0m", "must be greater than zero"),
        ("every", "missing duration"),
        ("every 30", "missing unit"),
        ("every 30m please", "can't read duration"),
        ("every 400d", "too long"),
        ("in 0m", "must be greater than zero"),
        ("every 99999999999d", "can't read duration"),
        ("0 9 * * * *", "needs 5 fields"),
        ("cron 0 9 * *", "needs 5 fields"),
        ("60 * * * *", "minute value 60 is out of range 0-59"),
        ("0 24 * * *", "hour value 24 is out of range 0-23"),
        ("0 9 32 * *", "day-of-month value 32 is out of range 1-31"),
        ("0 9 0 * *", "day-of-month value 0 is out of range 1-31"),
        ("0 9 * 13 *", "month value 13 is out of range 1-12"),
        ("0 9 * * 8", "day-of-week value 8 is out of range 0-7"),
        ("0 9 * * funday", "bad cron day-of-week value 'funday'"),
        ("*/0 * * * *", "step must be at least 1"),
        ("*/90 * * * *", "step 90 is too large"),
        ("5-1 * * * *", "backwards range '5-1'"),
        ("1,,2 * * * *", "bad cron minute field"),
        ("0 9 L * *", "bad cron day-of-month value 'l'"),
        ("0 0 30 2 *", "never fires"),
        ("at", "missing time after 'at'"),
        ("at next tuesday", "can't read time 'next tuesday'"),
        ("at 2026-13-01T10:00", "can't read time"),
        ("at 25:00", "bad time of day"),
        ("tomorrow noon", "can't read time 'noon'"),
        ("30m", "did you mean 'every 30m' or 'in 30m'"),
        ("hello world", "can't understand schedule 'hello world'"),
        ("remind me to drink water", "can't understand schedule"),
    ],
)
def test_bad_input_raises_one_line_schedule_error(text: str, message: str) -> None:
    with pytest.raises(ScheduleError) as info:
        parse_schedule(text, tz=BERLIN, now=NOW)
    assert message in str(info.value)
    assert "\n" not in str(info.value)
    assert isinstance(info.value, ValueError)


def test_unknown_time_zone_is_named() -> None:
    for bad in ("Mars/Olympus_Mons", "../etc/passwd", "Europe/"):
        with pytest.raises(ScheduleError, match=f"unknown time zone '{bad}'"):
            parse_schedule("every 30m", tz=bad, now=NOW)
    with pytest.raises(ScheduleError, match="unknown time zone 'Nowhere/Land'"):
        parse_schedule("every 30m", now=NOW, default_tz="Nowhere/Land")


def zone_of_a_process_started_with(tz: str) -> str:
    """The system zone a process started with `TZ=tz` sees (tzlocal reads it once per process)."""
    code = "from gateway.cron.expressions import local_timezone_name; print(local_timezone_name())"
    done = subprocess.run([sys.executable, "-c", code], env={**os.environ, "TZ": tz}, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_time_zone_precedence() -> None:
    system = local_timezone_name()
    ZoneInfo(system)
    assert parse_schedule("every 30m", now=NOW).timezone == system
    assert parse_schedule("every 30m", now=NOW, default_tz=BERLIN).timezone == BERLIN
    assert parse_schedule("every 30m", tz="Asia/Tokyo", now=NOW, default_tz=BERLIN).timezone == "Asia/Tokyo"
    assert zone_of_a_process_started_with(NEW_YORK) == NEW_YORK
    assert zone_of_a_process_started_with(":/usr/share/zoneinfo/Europe/Berlin") == BERLIN
    ZoneInfo(zone_of_a_process_started_with("Not/A_Zone"))  # ignored: the system's configuration, else UTC


def test_naive_datetimes_are_rejected() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        parse_schedule("every 30m", tz="UTC", now=datetime(2026, 6, 1))
    s = parse_schedule("0 9 * * *", tz="UTC", now=NOW)
    with pytest.raises(ValueError, match="timezone-aware"):
        s.next_after(datetime(2026, 6, 1))


@pytest.mark.parametrize(
    "text", ["every 1h30m", "0 9 * * 1-5", "cron 30 2 1 * sun", "at 2026-11-22T10:00", "in 20m", "tomorrow 9:00"]
)
def test_expression_round_trips(text: str) -> None:
    s = parse_schedule(text, tz=NEW_YORK, now=NOW)
    again = parse_schedule(s.expression, tz=s.timezone, now=NOW)
    assert again == s
    assert again.first(NOW) == s.first(NOW)


# --------------------------------------------------------------------------- every


def test_every_next_after_sequence() -> None:
    s = parse_schedule("every 30m", tz=BERLIN, now=NOW)
    assert s.first(NOW) == utc(2026, 6, 1, 6, 30)
    assert run_times(s, s.first(NOW), 3) == [utc(2026, 6, 1, 7, 0), utc(2026, 6, 1, 7, 30), utc(2026, 6, 1, 8, 0)]
    # strictly after, and measured from the given instant (no grid)
    assert s.next_after(utc(2026, 6, 1, 6, 31, 15)) == utc(2026, 6, 1, 7, 1, 15)
    assert s.next_after(datetime(2026, 6, 1, 8, 0, tzinfo=ZoneInfo(BERLIN))) == utc(2026, 6, 1, 6, 30)


def test_every_is_elapsed_time_across_dst() -> None:
    # every 1d from 12:00 CET on the day before spring forward: 24 h later is 13:00 CEST
    start = utc(2026, 3, 28, 11, 0)
    s = parse_schedule("every 1d", tz=BERLIN, now=start)
    assert run_times(s, start, 2) == [utc(2026, 3, 29, 11, 0), utc(2026, 3, 30, 11, 0)]
    assert s.first(start).astimezone(ZoneInfo(BERLIN)).hour == 13


# --------------------------------------------------------------------------- cron


def test_cron_next_after_sequence() -> None:
    s = parse_schedule("*/15 * * * *", tz="UTC", now=NOW)
    assert s.first(NOW) == NOW  # at/after: 06:00 itself matches
    assert run_times(s, NOW, 4) == [utc(2026, 6, 1, 6, 15), utc(2026, 6, 1, 6, 30),
                                    utc(2026, 6, 1, 6, 45), utc(2026, 6, 1, 7, 0)]
    assert s.next_after(utc(2026, 6, 1, 6, 14, 59, 999999)) == utc(2026, 6, 1, 6, 15)


def test_weekday_cron_across_a_week() -> None:
    # Standard crontab weekdays: 1-5 is Mon-Fri (APScheduler 3.x's from_crontab would read Tue-Sat).
    s = parse_schedule("0 9 * * 1-5", tz=BERLIN, now=NOW)
    sunday_night = utc(2026, 5, 31, 22, 0)
    times = run_times(s, sunday_night, 6)
    assert times == [
        utc(2026, 6, 1, 7, 0), utc(2026, 6, 2, 7, 0), utc(2026, 6, 3, 7, 0),
        utc(2026, 6, 4, 7, 0), utc(2026, 6, 5, 7, 0), utc(2026, 6, 8, 7, 0),
    ]
    assert [t.strftime("%a") for t in times] == ["Mon", "Tue", "Wed", "Thu", "Fri", "Mon"]
    assert parse_schedule("0 9 * * mon-fri", tz=BERLIN, now=NOW).next_after(sunday_night) == times[0]
    plain = CronTrigger.from_crontab("0 9 * * 1-5", timezone=BERLIN)
    assert plain.get_next_fire_time(None, sunday_night).strftime("%a") == "Tue"  # why we translate


@pytest.mark.parametrize("field", ["0", "7", "sun", "SUN"])
def test_sunday_is_0_or_7(field: str) -> None:
    s = parse_schedule(f"0 9 * * {field}", tz="UTC", now=NOW)
    assert run_times(s, NOW, 2) == [utc(2026, 6, 7, 9, 0), utc(2026, 6, 14, 9, 0)]


def test_weekend_ranges() -> None:
    for field in ("6-7", "sat-sun", "0,6", "6,0"):
        s = parse_schedule(f"0 9 * * {field}", tz="UTC", now=NOW)
        assert [t.strftime("%a") for t in run_times(s, NOW, 3)] == ["Sat", "Sun", "Sat"], field


def test_day_of_month_or_weekday() -> None:
    # Both restricted: the 1st of the month OR any Monday (Vixie cron), not only Mondays the 1st.
    s = parse_schedule("0 9 1 * 1", tz="UTC", now=utc(2026, 5, 20))
    assert run_times(s, utc(2026, 5, 20), 4) == [
        utc(2026, 5, 25, 9, 0), utc(2026, 6, 1, 9, 0), utc(2026, 6, 8, 9, 0), utc(2026, 6, 15, 9, 0),
    ]
    s = parse_schedule("0 9 15 * 1", tz="UTC", now=utc(2026, 6, 9))
    assert run_times(s, utc(2026, 6, 9), 2) == [utc(2026, 6, 15, 9, 0), utc(2026, 6, 22, 9, 0)]
    # A '*'-prefixed day field is unrestricted for this rule: odd days AND Mondays.
    s = parse_schedule("0 9 */2 * 1", tz="UTC", now=utc(2026, 6, 1))
    assert run_times(s, utc(2026, 6, 1), 2) == [utc(2026, 6, 1, 9, 0), utc(2026, 6, 15, 9, 0)]


def test_leap_day_cron_fires_in_leap_years() -> None:
    s = parse_schedule("0 0 29 2 *", tz="UTC", now=NOW)
    assert run_times(s, NOW, 2) == [utc(2028, 2, 29), utc(2032, 2, 29)]


def test_daily_cron_follows_the_local_clock_through_dst() -> None:
    # 09:00 Berlin = 08:00 UTC in winter (CET, +1) and 07:00 UTC in summer (CEST, +2).
    s = parse_schedule("0 9 * * *", tz=BERLIN, now=NOW)
    assert run_times(s, utc(2026, 3, 27, 12), 3) == [
        utc(2026, 3, 28, 8, 0), utc(2026, 3, 29, 7, 0), utc(2026, 3, 30, 7, 0)]
    assert run_times(s, utc(2026, 10, 23, 12), 3) == [
        utc(2026, 10, 24, 7, 0), utc(2026, 10, 25, 8, 0), utc(2026, 10, 26, 8, 0)]
    # 09:00 New York = 14:00 UTC (EST, -5) / 13:00 UTC (EDT, -4)
    s = parse_schedule("0 9 * * *", tz=NEW_YORK, now=NOW)
    assert run_times(s, utc(2026, 3, 6, 18), 3) == [
        utc(2026, 3, 7, 14, 0), utc(2026, 3, 8, 13, 0), utc(2026, 3, 9, 13, 0)]
    assert run_times(s, utc(2026, 10, 30, 18), 3) == [
        utc(2026, 10, 31, 13, 0), utc(2026, 11, 1, 14, 0), utc(2026, 11, 2, 14, 0)]


# --------------------------------------------------------------------------- DST edges


@pytest.mark.parametrize(
    ("tz", "expr", "after", "expected"),
    [
        # 02:30 does not exist on spring-forward day. APScheduler 3.11 reads the missing wall time
        # with the pre-change offset: 02:30 CET = 01:30 UTC = 03:30 CEST. Fires once, not lost.
        (BERLIN, "30 2 * * *", utc(2026, 3, 27, 12),
         [utc(2026, 3, 28, 1, 30), utc(2026, 3, 29, 1, 30), utc(2026, 3, 30, 0, 30)]),
        # 02:30 EST = 07:30 UTC = 03:30 EDT
        (NEW_YORK, "30 2 * * *", utc(2026, 3, 6, 12),
         [utc(2026, 3, 7, 7, 30), utc(2026, 3, 8, 7, 30), utc(2026, 3, 9, 6, 30)]),
    ],
)
def test_spring_forward_nonexistent_time_fires_once(tz: str, expr: str, after: datetime,
                                                    expected: list[datetime]) -> None:
    s = parse_schedule(expr, tz=tz, now=after)
    assert run_times(s, after, 3) == expected
    assert chained_trigger_times(s.trigger(), after, 3) == expected
    local = expected[1].astimezone(ZoneInfo(tz))
    assert (local.hour, local.minute) == (3, 30)
    # asked after the change but before 03:30, the run is still ahead
    assert s.next_after(expected[1] - timedelta(minutes=20)) == expected[1]


@pytest.mark.parametrize(
    ("tz", "expr", "after", "expected"),
    [
        # 02:30 happens twice in Berlin on 25 Oct (00:30 UTC as CEST, 01:30 UTC as CET): fire once.
        (BERLIN, "30 2 * * *", utc(2026, 10, 23, 12),
         [utc(2026, 10, 24, 0, 30), utc(2026, 10, 25, 0, 30), utc(2026, 10, 26, 1, 30)]),
        # 01:30 happens twice in New York on 1 Nov (05:30 UTC as EDT, 06:30 UTC as EST): fire once.
        (NEW_YORK, "30 1 * * *", utc(2026, 10, 30, 12),
         [utc(2026, 10, 31, 5, 30), utc(2026, 11, 1, 5, 30), utc(2026, 11, 2, 6, 30)]),
    ],
)
def test_fall_back_repeated_time_fires_once(tz: str, expr: str, after: datetime,
                                            expected: list[datetime]) -> None:
    s = parse_schedule(expr, tz=tz, now=after)
    assert run_times(s, after, 3) == expected
    assert chained_trigger_times(s.trigger(), after, 3) == expected
    # starting inside the repeated hour, after the first occurrence: next is tomorrow
    assert s.next_after(expected[1] + timedelta(minutes=40)) == expected[2]
    # Plain APScheduler 3.11 fires twice; this pins the behaviour the wrapper corrects.
    plain = CronTrigger.from_crontab(expr, timezone=tz)
    twice = chained_trigger_times(plain, after, 3)
    assert twice[1:] == [expected[1], expected[1] + timedelta(hours=1)]


def test_interval_like_cron_keeps_real_time_through_fall_back() -> None:
    # Vixie rule: minute/hour starting with '*' -> runs through the repeated hour in real time.
    s = parse_schedule("*/30 * * * *", tz=NEW_YORK, now=NOW)
    assert run_times(s, utc(2026, 11, 1, 4, 45), 6) == [
        utc(2026, 11, 1, 5, 0), utc(2026, 11, 1, 5, 30),  # 01:00, 01:30 EDT
        utc(2026, 11, 1, 6, 0), utc(2026, 11, 1, 6, 30),  # 01:00, 01:30 EST
        utc(2026, 11, 1, 7, 0), utc(2026, 11, 1, 7, 30),  # 02:00, 02:30 EST
    ]
    hourly = parse_schedule("0 * * * *", tz=BERLIN, now=NOW)
    assert run_times(hourly, utc(2026, 10, 24, 23, 30), 3) == [
        utc(2026, 10, 25, 0, 0), utc(2026, 10, 25, 1, 0), utc(2026, 10, 25, 2, 0)]  # 02:00 CEST, 02:00 CET, 03:00 CET
    # ...and through spring forward, with no duplicate or missing hour
    assert run_times(hourly, utc(2026, 3, 28, 23, 30), 3) == [
        utc(2026, 3, 29, 0, 0), utc(2026, 3, 29, 1, 0), utc(2026, 3, 29, 2, 0)]  # 01:00 CET, 03:00 CEST, 04:00 CEST


def test_several_runs_inside_the_spring_forward_gap() -> None:
    # 02:00 and 02:30 both fall in the gap: 01:00 UTC (03:00 CEST) and 01:30 UTC (03:30 CEST).
    s = parse_schedule("0,30 2 * * *", tz=BERLIN, now=NOW)
    expected = [utc(2026, 3, 29, 1, 0), utc(2026, 3, 29, 1, 30), utc(2026, 3, 30, 0, 0)]
    assert run_times(s, utc(2026, 3, 28, 23, 0), 3) == expected
    assert chained_trigger_times(s.trigger(), utc(2026, 3, 28, 23, 0), 3) == expected
    # Chained plain CronTrigger drops the 02:30 run (it resumes at 03:00:00.000001 CEST).
    plain = CronTrigger.from_crontab("0,30 2 * * *", timezone=BERLIN)
    assert chained_trigger_times(plain, utc(2026, 3, 28, 23, 0), 2)[1] == utc(2026, 3, 30, 0, 0)


def test_runs_plain_crontrigger_would_lose_across_a_change() -> None:
    # Daily 00:30 in Berlin, asked at 00:31 CET on spring-forward Sunday: next is Monday 00:30
    # CEST = Sunday 22:30 UTC. APScheduler 3.11's CronTrigger steps a day ahead in UTC, lands on
    # Monday 01:00 CEST and answers Tuesday.
    after = utc(2026, 3, 28, 23, 31)
    s = parse_schedule("30 0 * * *", tz=BERLIN, now=after)
    assert s.next_after(after) == utc(2026, 3, 29, 22, 30)
    plain = CronTrigger.from_crontab("30 0 * * *", timezone=BERLIN)
    assert plain.get_next_fire_time(None, after).astimezone(UTC) == utc(2026, 3, 30, 22, 30)
    # New York, 01:25 EST on spring-forward Sunday: 02:15 is in the gap -> 07:15 UTC (03:15 EDT).
    after = utc(2026, 3, 8, 6, 25)
    s = parse_schedule("15 1,2 * * *", tz=NEW_YORK, now=after)
    assert s.next_after(after) == utc(2026, 3, 8, 7, 15)
    plain = CronTrigger.from_crontab("15 1,2 * * *", timezone=NEW_YORK)
    assert plain.get_next_fire_time(None, after).astimezone(UTC) == utc(2026, 3, 9, 5, 15)


def test_trigger_chained_with_zoned_times_through_fall_back() -> None:
    # APScheduler hands the previous fire time back as a zoned datetime; 02:00 CET (fold=1) + 1 us
    # done naively would be 02:00 CEST, an hour earlier. The chain must keep going forward.
    s = parse_schedule("*/30 2 * * *", tz=BERLIN, now=NOW)
    expected = [utc(2026, 10, 25, 0, 0), utc(2026, 10, 25, 0, 30),  # 02:00, 02:30 CEST
                utc(2026, 10, 25, 1, 0), utc(2026, 10, 25, 1, 30),  # 02:00, 02:30 CET
                utc(2026, 10, 26, 1, 0)]
    assert chained_trigger_times(s.trigger(), utc(2026, 10, 24, 12), 5) == expected
    assert run_times(s, utc(2026, 10, 24, 12), 5) == expected


def test_half_hour_dst_shift() -> None:
    # Lord Howe Island moves +10:30 -> +11 at 02:00 local on 4 Oct 2026 (15:30 UTC on the 3rd).
    # Gap wall times 02:00 and 02:20 fire at +10:30 (15:30, 15:50 UTC); 02:40 +11 is 15:40 UTC.
    s = parse_schedule("*/20 * * * *", tz="Australia/Lord_Howe", now=NOW)
    assert run_times(s, utc(2026, 10, 3, 15, 15), 4) == [
        utc(2026, 10, 3, 15, 30), utc(2026, 10, 3, 15, 40), utc(2026, 10, 3, 15, 50), utc(2026, 10, 3, 16, 0)]


def test_once_at_a_nonexistent_or_repeated_local_time() -> None:
    gap = parse_schedule("at 2026-03-29T02:30", tz=BERLIN, now=NOW)
    assert gap.expression == "at 2026-03-29T03:30:00+02:00"  # same instant as cron: 01:30 UTC
    assert gap.next_after(utc(2026, 3, 29, 0)) == utc(2026, 3, 29, 1, 30)
    repeated = parse_schedule("at 2026-11-01T01:30", tz=NEW_YORK, now=NOW)
    assert repeated.next_after(utc(2026, 11, 1)) == utc(2026, 11, 1, 5, 30)  # first occurrence, EDT


def _brute_force_fire_times(s: CronSchedule, zone: ZoneInfo, day: datetime, days: int) -> list[datetime]:
    """Every minute of local wall time that matches, mapped to instants by the documented rules."""
    fixed_time = not (s.fields[0].startswith("*") or s.fields[1].startswith("*"))
    out: set[datetime] = set()
    wall, end = day, day + timedelta(days=days)
    while wall < end:
        dom, dow = wall.day in s.days, (wall.weekday() + 1) % 7 in s.weekdays
        if (wall.minute in s.minutes and wall.hour in s.hours and wall.month in s.months
                and ((dom or dow) if s.either_day else (dom and dow))):
            first = wall.replace(tzinfo=zone, fold=0).astimezone(UTC)  # gap: pre-change offset
            second = wall.replace(tzinfo=zone, fold=1).astimezone(UTC)
            out.add(first)
            repeated = all(t.astimezone(zone).replace(tzinfo=None) == wall for t in (first, second))
            if repeated and first != second and not fixed_time:
                out.add(second)
        wall += timedelta(minutes=1)
    return sorted(out)


DST_DAYS = {  # local day before each change
    BERLIN: (datetime(2026, 3, 28), datetime(2026, 10, 24)),
    NEW_YORK: (datetime(2026, 3, 7), datetime(2026, 10, 31)),
    "Australia/Lord_Howe": (datetime(2026, 4, 4), datetime(2026, 10, 3)),
}


@pytest.mark.parametrize(("tz", "expr"), [
    *((tz, expr) for tz in (BERLIN, NEW_YORK)
      for expr in ("30 2 * * *", "30 0 * * *", "*/20 1-3 * * *", "* 2 * * *", "15 1,2 * * 0")),
    ("Australia/Lord_Howe", "*/20 * * * *"),
    ("Australia/Lord_Howe", "10 2 * * *"),
])
def test_next_after_matches_brute_force_around_dst(tz: str, expr: str) -> None:
    """next_after(t) for t every 13.5 minutes over three days around each change equals the
    earliest brute-force fire time after t."""
    zone = ZoneInfo(tz)
    s = parse_schedule(expr, tz=tz, now=NOW)
    for day in DST_DAYS[tz]:
        expected = _brute_force_fire_times(s, zone, day, 3)
        t = day.replace(tzinfo=zone).astimezone(UTC)
        while t < expected[-1]:
            assert s.next_after(t) == min(f for f in expected if f > t), (expr, tz, t)
            t += timedelta(minutes=13, seconds=30)


# --------------------------------------------------------------------------- triggers


def test_triggers_are_apscheduler_3_triggers() -> None:
    every = parse_schedule("every 30m", tz=BERLIN, now=NOW)
    trig = every.trigger()
    assert isinstance(trig, IntervalTrigger)
    assert trig.get_next_fire_time(None, NOW) == utc(2026, 6, 1, 6, 30)
    assert trig.get_next_fire_time(utc(2026, 6, 1, 6, 30), utc(2026, 6, 1, 6, 30)) == utc(2026, 6, 1, 7, 0)

    once = parse_schedule("at 2026-11-22T10:00", tz=BERLIN, now=NOW)
    assert isinstance(once.trigger(), DateTrigger)
    assert once.trigger().get_next_fire_time(None, NOW) == utc(2026, 11, 22, 9, 0)

    cron = parse_schedule("0 9 * * 1-5", tz=BERLIN, now=NOW)
    trig = cron.trigger()
    assert all(isinstance(t, CronTrigger) for t in trig.triggers)
    assert trig.get_next_fire_time(None, NOW) == cron.first(NOW)
    assert trig.get_next_fire_time(None, NOW).tzinfo == ZoneInfo(BERLIN)
    restored = pickle.loads(pickle.dumps(trig))  # job stores pickle triggers
    assert chained_trigger_times(restored, NOW, 6) == chained_trigger_times(trig, NOW, 6)


# --------------------------------------------------------------------------- describe


@pytest.mark.parametrize(
    ("text", "tz", "description"),
    [
        ("every 30m", BERLIN, "every 30 minutes"),
        ("every 1h", BERLIN, "every hour"),
        ("every 1h30m", BERLIN, "every 1 hour 30 minutes"),
        ("every 2d", BERLIN, "every 2 days"),
        ("0 9 * * 1-5", BERLIN, "at 09:00 on Mon–Fri (Europe/Berlin)"),
        ("30 2 * * *", NEW_YORK, "at 02:30 every day (America/New_York)"),
        ("0 9 * * sat,sun", "UTC", "at 09:00 on Sat, Sun (UTC)"),
        ("0 9,17 * * 1,3,5", "UTC", "at 09:00 and 17:00 on Mon, Wed, Fri (UTC)"),
        ("0 8 1 * *", "UTC", "at 08:00 on day 1 of the month (UTC)"),
        ("0 8 1 * 1", "UTC", "at 08:00 on day 1 of the month and on Mon (UTC)"),
        ("0 0 1 1-3 *", "UTC", "at 00:00 on day 1 of the month in Jan–Mar (UTC)"),
        ("*/15 * * * *", "UTC", "every 15 minutes (UTC)"),
        ("5 * * * *", "UTC", "every hour at :05 (UTC)"),
        ("* * * * *", "UTC", "every minute (UTC)"),
        ("*/7 9-17 * * *", "UTC", "cron */7 9-17 * * * (UTC)"),
        ("at 2026-11-22T10:00", BERLIN, "once at 2026-11-22 10:00 CET"),
        ("at 2026-07-04T12:00:30", NEW_YORK, "once at 2026-07-04 12:00:30 EDT"),
    ],
)
def test_describe(text: str, tz: str, description: str) -> None:
    assert parse_schedule(text, tz=tz, now=NOW).describe() == description
