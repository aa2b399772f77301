"""What the operator's commands read (and remove) that the groups' own methods do not cover yet.

`approval_rules` and `remove_approval_rule` are the approvals group's ("always allow" rules), for
`chatgate approvals rules`; they are kept here only until that group takes them.
"""

from __future__ import annotations

from typing import Any

from gateway.storage.tables import Tables


class ReportReads(Tables):
    async def approval_rules(self) -> list[dict[str, Any]]:
        """Every "always allow" rule's row (id, kind, subject, subject_hash, confinement, scope, platform,
        chat_id, user_id, created_by, created_at), oldest first."""
        return [dict(r) for r in await self._all("SELECT * FROM approval_rules ORDER BY id")]

    async def remove_approval_rule(self, rule_id: int) -> bool:
        """Delete the rule; whether there was one."""
        return bool(await self._run("DELETE FROM approval_rules WHERE id = ?", (rule_id,)))
