"""Where the agent's memory and skills are kept (agent.documents): in the database when other instances share it
(PostgreSQL: every instance reads what another committed), else files in the home, as a person reads them."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from agent.documents import Documents, FolderDocuments

if TYPE_CHECKING:
    from gateway.storage import Store


def documents_of(store: "Store", home: Path) -> Documents:
    """The documents of the gateway on `store` with its home `home` (the daemon's choice, and the CLI's)."""
    return store.documents if store.shared else FolderDocuments(home)
