"""What keeps the agent's actions safe.

`classifier/` rates a shell command hardline, dangerous or safe; `sandbox` runs it in bubblewrap;
`readonly_commands` is the short list that runs unasked without a sandbox; `workspace_gate` holds the
workspace still while a command is checked and run, and `workspace_code` shows what code from it a
command runs; `beneath` opens paths beneath the workspace without following links; `content_scan`
checks what the agent writes into its memory and skills.
"""
