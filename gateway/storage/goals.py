"""Goals and subagent runs."""

from __future__ import annotations

from gateway.storage.tables import Tables


class GoalStore(Tables):
    pass
