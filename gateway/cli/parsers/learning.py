"""`chatgate skills|memory|curator …`: the skill library, proposed notes and the curator."""

from __future__ import annotations

from typing import Any

from gateway.cli.dispatch import handled_by


def add_parsers(sub: Any) -> None:
    skills = sub.add_parser("skills", help="the agent's skills: list, show, pin, archive, restore")
    handled_by(skills, "gateway.cli.learning:skills")
    skills_sub = skills.add_subparsers(dest="action", required=True)
    skills_sub.add_parser("list", help="skills with provenance and use (and the archived ones)")
    skills_sub.add_parser("pending", help="skills proposed in conversations of people who are not admins")
    for action, what in (("show", "print a skill"), ("pin", "never let the curator touch it"),
                         ("accept", "make a proposed skill live"), ("reject", "drop a proposed skill"),
                         ("unpin", "let the curator look after it again"), ("archive", "set it aside (restorable)"),
                         ("restore", "bring an archived skill back")):
        skills_sub.add_parser(action, help=what).add_argument("name")
    memory = sub.add_parser("memory", help="shared notes proposed in conversations of people who are not admins")
    handled_by(memory, "gateway.cli.learning:memory")
    memory_sub = memory.add_subparsers(dest="action", required=True)
    memory_sub.add_parser("pending", help="the notes waiting, numbered")
    for action, what in (("accept", "add note N to the shared notes"), ("reject", "drop note N")):
        memory_sub.add_parser(action, help=what).add_argument("number", type=int)
    curator = sub.add_parser("curator", help="the skill curator: status, run, restore a snapshot")
    handled_by(curator, "gateway.cli.learning:curator")
    curator_sub = curator.add_subparsers(dest="action", required=True)
    curator_sub.add_parser("status", help="when it ran, when it is due, its recent runs")
    run = curator_sub.add_parser("run", help="run it now (idle or not)")
    run.add_argument("--dry-run", action="store_true", help="report what it would change, change nothing")
    curator_sub.add_parser("restore", help="put back the skills as they were before a run").add_argument("run")
