"""`chatgate sessions|approvals|inbox|usage|backup|restore|pair`: the daemon's database, with or without it running."""

from __future__ import annotations

from typing import Any

from gateway.cli.dispatch import a_path, handled_by


def add_parsers(sub: Any) -> None:
    sessions = sub.add_parser("sessions", help="list or search conversations")
    handled_by(sessions, "gateway.cli.state:sessions")
    sessions_sub = sessions.add_subparsers(dest="action", required=True)
    listing = sessions_sub.add_parser("list", help="recent sessions")
    listing.add_argument("--limit", type=int, default=20)
    search = sessions_sub.add_parser("search", help="full-text search in transcripts")
    search.add_argument("query")
    search.add_argument("--platform", required=True)
    search.add_argument("--user", required=True)
    approvals = sub.add_parser("approvals", help="the command safety check and 'always allow' rules")
    approvals_sub = approvals.add_subparsers(dest="action", required=True)
    check = approvals_sub.add_parser("check", help="classify a shell command: hardline, dangerous or safe (JSON)")
    check.add_argument("shell_command")
    handled_by(check, "gateway.cli.check:check", config=False)  # needs no configuration
    rules = approvals_sub.add_parser("rules", help="list or remove 'always allow' rules")
    rules.add_argument("rules_action", choices=["list", "remove"])
    rules.add_argument("rule_id", nargs="?", type=int)
    handled_by(rules, "gateway.cli.state:rules")
    inbox = sub.add_parser("inbox", help="what could not be taken or answered")
    handled_by(inbox, "gateway.cli.state:inbox")
    inbox_sub = inbox.add_subparsers(dest="action", required=True)
    for action, what in (("dead", "input set aside after repeated failures (poison updates)"),
                         ("failed", "turns that failed and replies that could not be delivered")):
        inbox_sub.add_parser(action, help=what).add_argument("--limit", type=int, default=20)
    usage = sub.add_parser("usage", help="LLM tokens by loop (main, review, curator, cron), day and session")
    usage.add_argument("--days", type=float, default=7.0, help="how far back (default 7)")
    usage.add_argument("--json", action="store_true")
    handled_by(usage, "gateway.cli.state:usage")
    backup = sub.add_parser("backup", help="a consistent copy of the state while it runs (a .tar.gz)")
    a_path(backup.add_argument("file", help="where to write it, e.g. chatgate-2026-11-24.tar.gz"))
    handled_by(backup, "gateway.cli.state:backup")
    restore = sub.add_parser("restore", help="put back the state a backup holds (chatgate stopped)")
    a_path(restore.add_argument("archive", help="a file made by `chatgate backup`"))
    restore.add_argument("--force", action="store_true",
                         help="restore over the state the home holds (it is moved aside first, not deleted)")
    handled_by(restore, "gateway.cli.restore:restore", config=False)
    pair = sub.add_parser("pair", help="admit people who asked for access in a DM")
    handled_by(pair, "gateway.cli.state:pair")
    pair_sub = pair.add_subparsers(dest="action", required=True)
    pair_sub.add_parser("list", help="pending codes and approved people")
    approve = pair_sub.add_parser("approve", help="admit the person who was given CODE")
    approve.add_argument("platform")
    approve.add_argument("code")
    revoke = pair_sub.add_parser("revoke", help="remove an approved person")
    revoke.add_argument("platform")
    revoke.add_argument("user_id")
