"""Token usage and its daily sums."""

from __future__ import annotations

from gateway.storage.tables import Tables


class UsageStore(Tables):
    pass
