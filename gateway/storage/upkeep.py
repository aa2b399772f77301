"""What the database gives back: incremental vacuum, checkpoints, the one-time switch."""

from __future__ import annotations

from gateway.storage.tables import Tables


class Upkeep(Tables):
    pass
