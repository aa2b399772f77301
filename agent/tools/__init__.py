"""The agent's tools: the contract every tool keeps, and the tools themselves, one module per family.

    >>> from agent.tools import Tool, ToolContext, ToolRegistry

Here stand the contract (`contract`: a tool, the ports the gateway implements, the registry and its
scopes) and what a call is lent (`context`: whom it acts for, with what authority, where). The families
are imported by their own names, so that the loop, which needs only the contract, loads none of them:
`system` (the "system" toolset: `terminal` on `shell`, and the file tools of `files`, their results
passed through `redaction`), `learning` (memory and skills) and `builtin` (the current time, a search
over past conversations). Imports point one way: system → terminal, files; terminal → shell →
redaction; files → redaction; every family → contract → context. Subagents (`agent.delegation`, the
`delegate_task` tool) run the agent loop, so they stand beside it in `agent/`, not here.
"""

from agent.tools.contract import (ApprovalOutcome, ApprovalPort, ApprovalRequest, AskingFor, FileSink, NobodyToAsk,
                                  Place, Rank, Tool, ToolContext, ToolHandler, ToolJournal, ToolRegistry, ToolScope,
                                  TranscriptSearch, TurnShare)

__all__ = ["ApprovalOutcome", "ApprovalPort", "ApprovalRequest", "AskingFor", "FileSink", "NobodyToAsk", "Place",
           "Rank", "Tool", "ToolContext", "ToolHandler", "ToolJournal", "ToolRegistry", "ToolScope", "TranscriptSearch",
           "TurnShare"]
