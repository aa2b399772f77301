"""Approval requests, their events and the always-allow rules."""

from __future__ import annotations

from gateway.storage.tables import Tables


class ApprovalStore(Tables):
    pass
