"""Managing jobs from a chat: the agent's `cron` tool and the `/cron` command share this.

A person sees and changes only their own jobs (an admin: all of them), sends results only to
the chat they ask from (an admin: anywhere), and has at most `cron.max_jobs_per_person`. A job
the agent creates or rewrites (through its `cron` tool) runs later with nobody watching, so a
person approves it first, seeing its schedule, target and prompt; so does every other change the
agent makes to a job (pause, resume, remove, run now), showing the job. A person's own `/cron`
command and `chatgate cron` ask nobody. A job created from a chat
delivers to that chat and thread unless told otherwise. Every change reaches the running
scheduler at once.
"""

from __future__ import annotations

from typing import Any, Awaitable, Callable

from agent.tools import ApprovalRequest, Tool, ToolContext
from gateway.cron.jobs import CronError, CronJobs, Job, format_target, parse_target
from gateway.storage.cron import CronStore
from platforms.base import ChatRef

TOOLSET = "cron"  # scheduled runs get every toolset but this one
Consent = Callable[[str, str, str], Awaitable[str | None]]  # (kind, what, why) → None (approved) or the refusal
CHAT_ACTIONS = ("list", "pause", "resume", "remove", "run")
TOOL_ACTIONS = ("create", "list", "update", "pause", "resume", "remove", "run")
UNATTENDED = "a scheduled job runs later, unattended, with the agent's tools"
WHY = {"update": UNATTENDED,  # what a person is told when the agent wants to act on an existing job
       "pause": "pausing stops the job's runs until someone resumes it",
       "resume": "a resumed job runs again on its schedule, unattended, with the agent's tools",
       "remove": "removing deletes the job for good (its past runs stay in the ledger)",
       "run": "it runs the job's prompt now, unattended, with the agent's tools, and sends the result to its chat"}
DONE = {"update": "changed", "pause": "paused", "resume": "resumed", "remove": "removed", "run": "run"}


class CronManager:
    def __init__(self, jobs: CronJobs, cron: CronStore, changed: Callable[[], None],
                 is_admin: Callable[[str, str], bool], max_jobs_per_person: int = 20) -> None:
        self.jobs = jobs  # the jobs' rules (validation, ownership)
        self.cron = cron  # their rows: removing one, queueing a run
        self.changed = changed
        self.is_admin = is_admin
        self.max_jobs = max_jobs_per_person

    async def act(self, action: str, *, platform: str, user_id: str, chat: ChatRef | None = None,
                  session_key: str | None = None, job: str | None = None, consent: Consent | None = None,
                  **fields: Any) -> str:
        """Do `action` for this person; the answer (or a one-line refusal) as text. `consent` asks a
        person before a job the agent writes is created or changed (None: the person asked directly)."""
        try:
            return await self._act(action, platform, user_id, chat, session_key, job, fields, consent)
        except CronError as exc:
            return f"error: {exc}"

    async def _act(self, action: str, platform: str, user_id: str, chat: ChatRef | None, session_key: str | None,
                   ref: str | None, fields: dict[str, Any], consent: Consent | None) -> str:
        admin = self.is_admin(platform, user_id)
        owner = None if admin else (platform, user_id)
        if fields.get("deliver_to") and not admin:
            self._own_chat(fields["deliver_to"], chat)
        if action == "list":
            return describe_jobs(await self.jobs.list(owner=owner))
        if action == "create":
            if not admin and len(await self.jobs.list(owner=owner)) >= self.max_jobs:
                raise CronError(f"you have {self.max_jobs} jobs already (cron.max_jobs_per_person); remove one first")
            if consent is not None:
                refusal = await consent("job", _job_text("create", fields, format_target(chat)), UNATTENDED)
                if refusal:
                    return f"{refusal}\nThe job was NOT created."
            return await self._create(platform, user_id, chat, session_key, fields)
        if action not in TOOL_ACTIONS:
            raise CronError(f"unknown action {action!r}; use one of {', '.join(TOOL_ACTIONS)}")
        if not ref:
            raise CronError(f"say which job to {action}: its number or name")
        job = await self.jobs.find(str(ref), owner=owner)
        if action == "update" and not any(v is not None for v in fields.values()):
            raise CronError("nothing to change: give name, prompt, schedule, timezone, deliver_to, missed or model")
        if consent is not None:  # the agent acts on a job that runs unattended: a person says yes, seeing it
            what = _job_text(f"change job #{job.id} to", fields, job.target) + f"\n\nthe job now: {job.describe()}" \
                if action == "update" else _job_text(f"{action} job #{job.id}", _fields(job), job.target)
            refusal = await consent("job_change", what, WHY[action])
            if refusal:
                return f"{refusal}\nThe job was NOT {DONE[action]}."
            now = await self.jobs.find(str(job.id), owner=owner)
            if (_fields(now), now.target) != (_fields(job), job.target):  # what was approved is what is done
                raise CronError(f"job #{job.id} changed while the approval was asked; it was NOT {DONE[action]}")
        if action == "update":
            changed = await self.jobs.update(job.id, name=fields.get("name"), prompt=fields.get("prompt"),
                                             schedule=fields.get("schedule"), timezone=fields.get("timezone"),
                                             target=fields.get("deliver_to"), missed_policy=fields.get("missed"),
                                             model=fields.get("model"))
            return self._done(f"Updated: {changed.describe()}")
        if action in ("pause", "resume"):
            changed = await self.jobs.set_enabled(job.id, action == "resume")
            return self._done(f"{'Resumed' if action == 'resume' else 'Paused'}: {changed.describe()}")
        if action == "remove":
            await self.cron.remove_job(job.id)
            return self._done(f"Removed job #{job.id} {job.name}. Its past runs stay in the ledger.")
        await self.cron.queue_run(job.id)
        return self._done(f"Job #{job.id} {job.name} will run now; its result goes to {job.target}.")

    async def _create(self, platform: str, user_id: str, chat: ChatRef | None, session_key: str | None,
                      fields: dict[str, Any]) -> str:
        for needed in ("name", "prompt", "schedule"):
            if not fields.get(needed):
                raise CronError(f"creating a job needs {needed}")
        target = fields.get("deliver_to") or format_target(chat)
        job = await self.jobs.create(
            name=fields["name"], prompt=fields["prompt"], schedule=fields["schedule"], owner_platform=platform,
            owner_id=user_id, target=target, owner_chat=format_target(chat) if chat else None,
            owner_key=session_key, timezone=fields.get("timezone"), missed_policy=fields.get("missed") or "run_once",
            model=fields.get("model"))
        return self._done(f"Created: {job.describe()}")

    @staticmethod
    def _own_chat(target: str, chat: ChatRef | None) -> None:
        """Non-admins send a job's results only to the chat they ask from (or nowhere)."""
        if target.strip().lower() == "none":
            return
        parsed = parse_target(target)
        if chat is None or parsed is None or (parsed.platform, parsed.chat_id) != (chat.platform, chat.chat_id):
            raise CronError("only an admin can send a job's results to another chat; leave deliver_to out "
                            "(this chat) or set it to none")

    def _done(self, text: str) -> str:
        self.changed()
        return text

    async def pause(self, job_id: int) -> None:
        """Pause a job on the gateway's own account (its owner may no longer have it run)."""
        await self.jobs.set_enabled(job_id, False)
        self.changed()

    # -- the chat command -----------------------------------------------------------------

    async def command(self, args: str, *, platform: str, user_id: str, chat: ChatRef, session_key: str) -> str:
        """`/cron list|pause|resume|remove|run [job]`."""
        action, _, ref = args.strip().partition(" ")
        action = action.lower() or "list"
        if action not in CHAT_ACTIONS:
            return f"Usage: /cron {'|'.join(CHAT_ACTIONS)} [job number or name]. To create a job, just ask me."
        answer = await self.act(action, platform=platform, user_id=user_id, chat=chat, session_key=session_key,
                                job=ref.strip() or None)
        return answer.removeprefix("error: ").capitalize() if answer.startswith("error: ") else answer

    # -- the agent tool -------------------------------------------------------------------

    def tool(self) -> Tool:
        async def cron(ctx: ToolContext, action: str, job: str | int | None = None, **fields: Any) -> str:
            chat = ChatRef(ctx.platform, ctx.chat_id, ctx.place.thread_id)

            async def consent(kind: str, subject: str, why: str) -> str | None:  # a person says yes
                if ctx.approvals is None:
                    return "refused: a scheduled job needs a person's approval and nobody can approve here."
                outcome = await ctx.approvals.request(ctx, ApprovalRequest(kind, subject, (why,)))
                return None if outcome.approved else outcome.message

            return await self.act(action, platform=ctx.platform, user_id=ctx.user_id, chat=chat,
                                  session_key=ctx.place.session_key, consent=consent,
                                  job=str(job) if job is not None else None, **fields)

        text = {"type": "string"}
        return Tool("cron", CRON_TOOL_DESCRIPTION, {
            "type": "object", "required": ["action"],
            "properties": {
                "action": {"type": "string", "enum": list(TOOL_ACTIONS)},
                "job": {"type": "string", "description": "the job's number or name (not for create/list)"},
                "name": {**text, "description": "a short name"},
                "prompt": {**text, "description": "what to do at each run, written as an instruction to yourself"},
                "schedule": {**text, "description": "every 30m | 0 9 * * 1-5 (cron) | at 2026-12-01T09:00 | in 20m"},
                "timezone": {**text, "description": "IANA zone, e.g. Europe/Berlin (default: the gateway's)"},
                "deliver_to": {**text, "description": "platform:chat[:thread] or none (default: this chat)"},
                "missed": {"type": "string", "enum": ["run_once", "skip"],
                           "description": "if the gateway was down at the time: run once when back, or skip"},
                "model": {**text, "description": "the model its runs use, if not the main one"},
            }}, cron, toolset=TOOLSET, side_effects=True)


CRON_TOOL_DESCRIPTION = (
    "Schedule tasks for yourself: reminders and recurring jobs whose result is sent to this chat. "
    "Each run is a fresh conversation that sees only the job's prompt, so write the prompt so it stands "
    "alone (\"Remind Ann to call the dentist\", \"Summarise today's open pull requests in owner/repo\"). "
    "Actions: create (name, prompt, schedule), list, update, pause, resume, remove, run (now)."
)


def _job_text(what: str, fields: dict[str, Any], target: str) -> str:
    """What a person approves: the job's schedule, where its results go, and its prompt."""
    lines = [f"{what}: {fields.get('name') or ''}".rstrip(": "),
             *(f"{key}: {fields[key]}" for key in ("schedule", "timezone", "model") if fields.get(key)),
             f"results to: {fields.get('deliver_to') or target}"]
    if fields.get("prompt"):
        lines += ["prompt:", str(fields["prompt"])]
    return "\n".join(lines)


def _fields(job: Job) -> dict[str, Any]:
    """A job as the fields `_job_text` shows."""
    return {"name": job.name, "schedule": job.schedule, "timezone": job.timezone, "model": job.model,
            "prompt": job.prompt}


def describe_jobs(jobs: list[Job]) -> str:
    return "\n".join(j.describe() for j in jobs) if jobs else "No scheduled jobs."
