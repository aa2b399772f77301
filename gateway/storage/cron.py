"""Scheduled jobs and their runs (the ledger)."""

from __future__ import annotations

from gateway.storage.tables import Tables


class CronStore(Tables):
    pass
