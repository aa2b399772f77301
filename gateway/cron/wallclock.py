"""Cron on the wall clock of a time zone, as an APScheduler 3.x trigger that neither loses nor
doubles runs across a DST change (see `WallClockCronTrigger`; `gateway.cron.expressions` parses
the expressions that build it)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone, tzinfo

from apscheduler.triggers.base import BaseTrigger
from apscheduler.triggers.cron import CronTrigger

UTC = timezone.utc
_TICK = timedelta(microseconds=1)
# Clock jumps in the tz database are at most 2 h; look back a bit further than that.
_GAP_LOOKBACK = timedelta(hours=3)


class WallClockCronTrigger(BaseTrigger):
    """Cron on the wall clock of `timezone`, computed with APScheduler 3.x CronTriggers.

    `specs` are crontab strings in APScheduler's dialect (weekdays as names); more than one
    means "fire when any of them fires" (day-of-month OR day-of-week).

    Why not a plain CronTrigger on the zone: APScheduler 3.11 steps from one candidate to the
    next by adding the naive wall-clock difference in UTC, which is off by the DST shift when
    the step crosses a change. It then skips runs, e.g. ``30 0 * * *`` in Berlin asked at
    00:31 CET on spring-forward Sunday answers Tuesday 00:30 (Monday lost); from 01:25 EST
    ``15 1,2 * * *`` in New York steps to 03:00 EDT and loses 02:15; chained calls for
    ``0,30 2 * * *`` lose the 02:30 run on spring-forward day. And in the repeated hour of a
    fall-back change it fires a fixed-time job twice.

    So fire times are computed on fixed-offset zones, where CronTrigger is exact: from the
    offset in force at the search start up to the next change of offset, then from the change
    on with the new offset. Results, by design:

    * spring forward: a wall time in the gap fires at "wall time - offset before the change"
      (what CronTrigger and zoneinfo's fold=0 give: 02:30 CET = 03:30 CEST), once;
    * fall back: a repeated wall time matches twice; with `once_per_wall_time` only the first
      occurrence fires.

    `triggers` are the plain CronTriggers on the zone, for display. Returns times in
    `timezone`; `next_at_or_after` returns UTC.
    """

    __slots__ = ("_fixed", "once_per_wall_time", "specs", "timezone", "triggers")

    def __init__(self, specs: list[str], timezone: tzinfo, once_per_wall_time: bool) -> None:
        self.specs = list(specs)
        self.timezone = timezone
        self.once_per_wall_time = once_per_wall_time
        self.triggers = [CronTrigger.from_crontab(spec, timezone=timezone) for spec in self.specs]
        self._fixed: dict[timedelta, list[CronTrigger]] = {}  # offset -> specs on a fixed-offset zone

    def get_next_fire_time(self, previous_fire_time: datetime | None, now: datetime) -> datetime | None:
        # Arithmetic in UTC: adding to a zoned datetime resets `fold` (02:00 CET + 1 us would be
        # 02:00:00.000001 CEST, an hour earlier).
        start = now.astimezone(UTC)
        if previous_fire_time is not None:  # as CronTrigger does it
            previous = previous_fire_time.astimezone(UTC)
            start = min(start, previous + _TICK)
            if start == previous:
                start += _TICK
        found = self.next_at_or_after(start)
        return found.astimezone(self.timezone) if found is not None else None

    def next_at_or_after(self, start: datetime) -> datetime | None:
        """The earliest fire time >= `start`, in UTC."""
        start = start.astimezone(UTC)
        while True:
            found = self._earliest(start)
            if found is None or not (self.once_per_wall_time and self._is_repeat(found)):
                return found
            start = found + _TICK

    def _offset(self, when: datetime) -> timedelta:
        return when.astimezone(self.timezone).utcoffset()

    def _first_on_offset(self, offset: timedelta, start: datetime) -> datetime | None:
        triggers = self._fixed.get(offset)
        if triggers is None:
            fixed = timezone(offset)
            triggers = self._fixed[offset] = [CronTrigger.from_crontab(s, timezone=fixed) for s in self.specs]
        times = [t.get_next_fire_time(None, start) for t in triggers]
        times = [t.astimezone(UTC) for t in times if t is not None]
        return min(times) if times else None

    def _earliest(self, start: datetime) -> datetime | None:
        # Begin a little before `start` so a spring-forward gap that has just ended is seen:
        # its wall times fire after the change (02:30 CET is 03:30 CEST), maybe after `start`.
        segment, in_gap = start - _GAP_LOOKBACK, None
        while True:
            offset = self._offset(segment)
            found = self._first_on_offset(offset, max(segment, start))
            if found is None or (in_gap is not None and found >= in_gap):
                return in_gap
            change = self._next_change(segment, found, offset)
            if change is None:
                return found  # the offset holds from segment to found: exact
            shift = self._offset(change) - offset
            if shift > timedelta(0) and found < change + shift:
                # A wall time inside the gap, fired at the offset before the change. Wall times
                # just after the gap may come first (30-minute shifts): look on from the change.
                in_gap = found
            segment = change

    def _next_change(self, begin: datetime, end: datetime, offset: timedelta) -> datetime | None:
        """The first instant in (begin, end] whose offset differs from `offset`, else None.
        Probes every 6 h (offsets never change twice within that), then bisects to the second."""
        lo, probe = begin, begin
        while probe < end:
            probe = min(probe + timedelta(hours=6), end)
            if self._offset(probe) != offset:
                break
            lo = probe
        else:
            return None
        lo_s, hi_s = int(lo.timestamp()), int(-(-probe.timestamp() // 1))
        while hi_s - lo_s > 1:
            mid = (lo_s + hi_s) // 2
            if self._offset(datetime.fromtimestamp(mid, UTC)) != offset:
                hi_s = mid
            else:
                lo_s = mid
        return datetime.fromtimestamp(hi_s, UTC)

    def _is_repeat(self, when: datetime) -> bool:
        """True for the second occurrence of a wall time repeated by a fall-back change."""
        local = when.astimezone(self.timezone)
        return bool(local.fold) and local.replace(fold=0).utcoffset() != local.utcoffset()

    def __getstate__(self) -> dict:
        return {"version": 1, "specs": self.specs, "timezone": self.timezone,
                "once_per_wall_time": self.once_per_wall_time}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["specs"], state["timezone"], state["once_per_wall_time"])

    def __str__(self) -> str:
        return "wallclock-cron[{}]".format(" | ".join(str(t) for t in self.triggers))

    def __repr__(self) -> str:
        return (f"<{type(self).__name__} specs={self.specs!r} timezone='{self.timezone}' "
                f"once_per_wall_time={self.once_per_wall_time}>")
