"""Pairing codes, approved people and revocations."""

from __future__ import annotations

from gateway.storage.tables import Tables


class AccessStore(Tables):
    pass
