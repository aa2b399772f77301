"""Storage: every SQL statement chatgate runs, behind methods that take and return plain values.

`Store` (store.py) opens the one SQLite database and holds its groups of tables, a module each:
`inbox` and `outbox` (messages in, replies out), `sessions` (transcripts, search, a turn's commit),
`approvals`, `cron`, `goals`, `subagents` (subagent runs), `learning`, `usage`, `access`; each prunes its
own rows, and `upkeep` gives the freed space back to the file system. `database.py` is the group commit on aiosqlite;
`schema.py` applies `migrations/`. A second backend is one more implementation of the same groups.
"""

from gateway.storage.database import SchemaError, StorageError
from gateway.storage.store import Store

__all__ = ["SchemaError", "StorageError", "Store"]
