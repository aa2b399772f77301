"""The task board: a backlog the agent works through on its own.

A task (gateway.storage.board) is `todo` until its parents are done, then `ready`. The dispatcher
(`dispatcher.Dispatcher`, on the tick, every second and whenever the board changes) claims ready tasks, up to
`board.max_running` on every instance together, and runs each as a goal (`runs.TaskRuns`: turns in a session of
its own, `task:<id>`, each judged, up to `board.max_turns`) with its owner's rights. The chat the task came from
hears when it starts, when it asks something (blocked) and once when it is done. People work the board with
`/task` in a chat (`tasks.Board`), the operator with `chatgate board`, the agent with its `board` tool
(`tool.board_tool`).
"""
