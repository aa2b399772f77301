"""`chatgate storage migrate --to URL`: the home's SQLite database copied into an empty PostgreSQL database.

It holds the home's lock for its whole run (`HomeLock`, what `chatgate run` takes): it refuses while a
daemon runs on the home, and no daemon can start on it while it copies, so the copy is the state as the
daemon left it. The copy itself is `gateway.storage.copy` (all or nothing), with the home's `memory/` and
`skills/` files (the agent's notes and skills: on PostgreSQL they are rows every instance reads; a file that is
not UTF-8 text is left out, and named). The config is not changed: the
operator sets `storage.url` once the copy is done, and `state.db` stays as it was, the only way back.
A refusal is one line on stderr, exit 1, never the URL's password.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from gateway.config import Config, postgres_url_problem
from gateway.ops.process import HomeInUse, HomeLock

FOLDERS = ("memory", "skills")  # the home's documents (agent.documents) an instance on PostgreSQL reads from it


class Refused(Exception):
    """Nothing was copied; the message says why."""


async def migrate(config: Config, args: argparse.Namespace) -> int:
    from gateway.storage.copy import CopyRefused, copy_to_postgres
    from gateway.storage.postgres_engine import where

    try:
        url = _target(args.to or config.database_url)
        lock = _hold(config)
        try:
            documents, skipped = await home_documents(config.home)
            copied = await copy_to_postgres(config.db_path, url, documents=documents)
        finally:
            lock.release()
    except (Refused, CopyRefused) as exc:
        print(f"chatgate storage migrate: {exc}; nothing was copied", file=sys.stderr)
        return 1
    width = max(map(len, copied.rows))
    print(f"copied {config.db_path} into {where(url)}:")
    for table, rows in copied.rows.items():
        print(f"  {table:<{width}}  {rows:>9,}")
    rate = f", {copied.total / copied.seconds:,.0f} rows/s" if copied.seconds > 0 else ""
    print(f"  {'total':<{width}}  {copied.total:>9,} rows in {len(copied.rows)} tables ({copied.seconds:.1f} s{rate})")
    print(f"  and {copied.documents:,} files of {' and '.join(f + '/' for f in FOLDERS)} (the agent's notes and "
          "skills) into the documents table; the files in the home were left as they were")
    for name, why in skipped:
        print(f"  not copied: {name} ({why})")
    print(f"To switch: set storage.url to this URL in {config.file} (storage: {{url: postgresql://...}}) or "
          "CHATGATE_STORAGE__URL in the service's environment, then start chatgate. The config was not changed. "
          f"{config.db_path} was left as it was: keep it (or a backup of it), it is the only way back to SQLite.")
    return 0


async def home_documents(home: Path) -> tuple[dict[str, str], list[tuple[str, str]]]:
    """The text of every file under the home's FOLDERS, by document name; and those left out, with why."""
    from agent.documents import FolderDocuments

    folder = FolderDocuments(home)
    found: dict[str, str] = {}
    skipped: list[tuple[str, str]] = []
    for top in FOLDERS:
        for name in await folder.names(top + "/"):
            try:
                text = await folder.read(name)
            except UnicodeDecodeError:
                skipped.append((name, "not UTF-8 text"))
                continue
            except OSError as exc:
                skipped.append((name, exc.strerror or type(exc).__name__))
                continue
            if text is None:
                continue
            if "\0" in text:
                skipped.append((name, "it holds a NUL character"))
                continue
            found[name] = text
    return found, skipped


def _target(url: str | None) -> str:
    if not url:
        raise Refused("name the PostgreSQL database: --to postgresql://user[:password]@host[:port]/dbname "
                      "(or set storage.url)")
    problem = postgres_url_problem(url)
    if problem is not None:
        raise Refused(f"--to {problem}")
    return url


def _hold(config: Config) -> HomeLock:
    if not config.db_path.is_file():
        raise Refused(f"there is no database at {config.db_path}: nothing to copy")
    try:
        return HomeLock.take(config.home)
    except HomeInUse as exc:
        raise Refused(f"chatgate is running on {config.home} (pid {exc.pid or 'unknown'}): stop it first "
                      "(`chatgate service stop`, or Ctrl-C where it runs)") from None
    except OSError as exc:
        raise Refused(f"cannot lock {exc.filename or config.home}: {exc.strerror or exc}") from None
