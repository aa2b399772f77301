"""Building the gateway: its parts made from the configuration and an open store, each given only what it
uses, in the order each needs the others. Nothing here starts anything (`gateway.runner` starts and stops
the parts); the result is `Parts`, a frozen value.

`build` (build.py) makes them in order: access and the agents, the agent's tools (`tools`), delivery,
learning and approvals, what runs on the clock (`scheduled`: jobs, curator, retention, the tick's hooks),
and the message road (`road`: sessions, goals, turns, commands, intake). Two pairs of parts need each
other and are joined after both exist, as python-telegram-bot adds handlers to an application it has
built: a goal queues its turns in `Sessions` and a turn reports to its goal (`Sessions.serve`); a job
changed or paused wakes `CronTimers`, which run jobs through `CronRuns` (`CronTimers.serve`).
"""

from gateway.assembly.build import build
from gateway.assembly.parts import Ground, Parts

__all__ = ["Ground", "Parts", "build"]
