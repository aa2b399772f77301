"""Background reviews, curator runs, skill usage and trajectories."""

from __future__ import annotations

from gateway.storage.tables import Tables


class LearningStore(Tables):
    pass
