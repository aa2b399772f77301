"""Storage: every SQL statement chatgate runs, behind methods that take and return plain values.

`Store` (store.py) opens the one SQLite database and holds its groups of tables, a module each:
`inbox` and `outbox` (messages in, replies out), `sessions` (transcripts, search, a turn's commit),
`approvals`, `cron`, `goals`, `subagents` (subagent runs), `learning`, `usage`, `access`; each prunes its
own rows, and `upkeep` gives the freed space back to the file system. The groups' SQL is written against
`connection.Connection` (asyncpg's method names, `?` arguments, columns by name), in a form SQLite and
PostgreSQL both take; what only SQLite takes comes from `sqlite_dialect.py`, by name. SQLite's engine is
`database.py` (the group commit on aiosqlite, through `sqlite_connection.py`); `schema.py` applies
`migrations/`. A second engine is one more `Connection` and dialect beside them.
"""

from gateway.storage.database import SchemaError, StorageError
from gateway.storage.store import Store

__all__ = ["SchemaError", "StorageError", "Store"]
