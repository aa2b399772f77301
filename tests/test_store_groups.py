"""Each storage group through the Store API, on both engines (tests.engines): what every method stores and
reads back, with the Python types the callers rely on (an int is an int, a float a float), so that an SQL
text that one engine takes and the other refuses, or reads back otherwise, fails here and not in a daemon."""

from __future__ import annotations

import json
import time
from dataclasses import replace

from gateway.storage import Store
from gateway.storage.approvals import Approval
from gateway.storage.cron import SlotRecord
from gateway.storage.outbox import OutboxItem
from platforms.base import ChatRef, InboundMessage
from tests.engines import OpenStore
from tests.harness import web_message

DAY = 86400.0


def said(chat: ChatRef, user: str, text: str, n: int) -> InboundMessage:
    return InboundMessage(platform=chat.platform, chat_id=chat.chat_id, chat_type="group", user_id=user, text=text,
                          message_id=f"m{n}")


async def test_inbox_states_intents_effects_and_counts(open_store: OpenStore):
    store = await open_store()
    first = await store.inbox.add(web_message(1), "web:c1")
    second = await store.inbox.add(web_message(2), "web:c2")
    assert isinstance(first, int) and await store.inbox.add(web_message(1), "web:c1") is None
    intent = await store.inbox.draft_intent(first)
    assert (intent.part, intent.after, intent.draft) == (0, "m1", False)
    await store.inbox.add_effect(first, "terminal: ls")
    await store.inbox.add_effect(first, "write_file: a.txt")
    [unfinished] = await store.inbox.unfinished(first)
    assert unfinished.effects == ["terminal: ls", "write_file: a.txt"] and unfinished.draft_intent is not None
    assert await store.inbox.queue_counts() == {"waiting": 1, "running": 1, "outbox_pending": 0}
    store.inbox.set_draft(first, "d1")
    await store.inbox.set_state([second], "failed", "it broke")
    [unfinished] = await store.inbox.unfinished()
    assert (unfinished.inbox_id, unfinished.draft_message_id, unfinished.draft_intent) == (first, "d1", None)
    await store.inbox.dead_letter("telegram", "update 7", "x" * 70000, "not json")
    [letter] = await store.inbox.dead_letters()
    assert len(letter["payload"]) == 65536 and letter["reason"] == "not json"
    assert await store.inbox.trouble_counts() == {"dead_letters": 1, "failed_turns": 1, "failed_deliveries": 0,
                                                  "pending_replies": 0}
    assert [(f["kind"], f["error"]) for f in await store.inbox.failures()] == [("turn", "it broke")]
    assert {e["what"] for e in await store.inbox.recent_errors()} == {"turn", "input"}
    assert isinstance(await store.inbox.last_received_at(), float)


async def test_outbox_parts_intents_known_ids_and_chats(open_store: OpenStore):
    store = await open_store()
    chat = ChatRef("web", "c1")
    inbox_id = await store.inbox.add(web_message(1), "web:c1")
    item = OutboxItem(chat, "hello", buttons=[[{"text": "ok", "data": "1"}]], inbox_id=inbox_id)
    reply_id = await store.outbox.add(item, done_inbox_id=inbox_id)
    assert item.intent is not None and (item.intent.part, item.intent.after) == (0, "m1")
    assert await store.inbox.unfinished() == []
    [pending] = await store.outbox.pending("web", "c1")
    assert (pending.id, pending.text, pending.buttons, pending.sent_ids) == (reply_id, "hello", item.buttons, [])
    assert await store.outbox.chats() == [("web", "c1")] and await store.outbox.chats(before=0) == []
    pending.sent_ids, pending.attempts = ["s1"], 1
    pending.intent = await store.outbox.intend(pending, 1)
    assert (pending.intent.part, pending.intent.after, pending.intent.tried) == (1, "s1", False)
    await store.outbox.progress(pending, done=False)
    [again] = await store.outbox.pending()
    assert again.intent is not None and (again.intent.part, again.intent.after) == (1, "s1")
    store.outbox.forget_intent(reply_id, 1)
    await store.inbox.add(web_message(2), "web:c2")  # (the forgetting rides with this commit)
    [again] = await store.outbox.pending()
    assert again.intent is None
    again.sent_ids.append("s2")
    await store.outbox.progress(again, done=True)
    assert await store.outbox.pending() == []
    assert await store.outbox.known_ids("web", "c1") == {"m1", "s1", "s2"}
    failed = OutboxItem(chat, "never", id=await store.outbox.add(OutboxItem(chat, "never")))
    await store.outbox.progress(failed, done=False, error="gone", failed=True)
    assert (await store.inbox.trouble_counts())["failed_deliveries"] == 1


async def _talk(store: Store, key: str, chat: ChatRef, user: str, text: str, inbox_ids: list[int]) -> int:
    session = await store.sessions.active(key, chat, "group")
    await store.sessions.commit_turn(session, inbox_ids, chat, user, [
        {"role": "user", "content": text},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "t1", "type": "function",
                                                               "function": {"name": "clock", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "t1", "name": "clock", "content": "noon"},
        {"role": "assistant", "content": f"noted: {text}"}], None)
    return session


async def test_sessions_turns_history_speakers_and_forgetting(open_store: OpenStore):
    store = await open_store()
    chat = ChatRef("telegram", "-5")
    inbox_id = await store.inbox.add(said(chat, "ann", "hi", 1), "telegram:-5")
    session = await _talk(store, "telegram:-5", chat, "ann", "hi", [inbox_id])
    assert isinstance(session, int) and await store.sessions.active("telegram:-5", chat, "group") == session
    await _talk(store, "telegram:-5", chat, "bob", "hello", [])
    await _talk(store, "telegram:-5", chat, "ann", "again", [])
    assert await store.sessions.speakers(session) == [("telegram", "bob"), ("telegram", "ann")]
    history = await store.sessions.history(session)
    assert [m["role"] for m in history[:4]] == ["user", "assistant", "tool", "assistant"]
    assert history[1]["tool_calls"][0]["function"]["name"] == "clock" and len(history) == 12
    assert (await store.inbox.fetchrow("SELECT state FROM inbox WHERE id = ?", inbox_id))["state"] == "done"
    ids = [r["id"] for r in await store.fetch("SELECT id FROM messages WHERE session_id = ? ORDER BY id", session)]
    await store.sessions.save_summary(session, ids[7], "they said hi twice")
    start = await store.sessions.open_turn("telegram:-5", chat, "group")
    assert start.session_id == session and "they said hi twice" in json.dumps(start.history) and None in start.ids
    assert await store.sessions.in_thread("telegram", "-5", "m1", "other") is True
    assert await store.sessions.in_thread("telegram", "-5", "m9", "other") is False
    assert await store.sessions.chat_type("telegram:-5") == "group"
    facts = await store.sessions.facts(session)
    assert facts is not None and facts.platform == "telegram" and facts.ended_at is None
    summary = await store.sessions.summary("telegram:-5")
    assert summary is not None and summary["messages"] == 12 and type(summary["messages"]) is int
    [listed] = await store.sessions.listing()
    assert (listed["id"], listed["key"], listed["messages"]) == (session, "telegram:-5", 12)
    assert await store.sessions.end("telegram:-5") == session and await store.sessions.end("telegram:-5") is None
    assert await store.sessions.prune_leftovers(time.time() + 1) == (0, 0)
    assert await store.sessions.prune_ended(time.time() - DAY) == 0
    assert await store.sessions.prune_ended(time.time() + 1) == 1
    assert await store.fetchval("SELECT count(*) FROM messages") == 0


def _approval(approval_id: str, session_id: int | None, *, kind: str = "command") -> Approval:
    now = time.time()
    return Approval(approval_id, "telegram:-5", session_id, "telegram", "-5", None, "ann", kind, "rm -rf build",
                    "hash1", "sandbox", ["deletes files"], now, now + 600)


async def test_approvals_decisions_grants_rules_and_pruning(open_store: OpenStore):
    store = await open_store()
    session = await store.sessions.active("telegram:-5", ChatRef("telegram", "-5"), "group")
    for approval_id in ("a1", "a2", "a3"):
        await store.approvals.add(_approval(approval_id, session))
    assert sorted(await store.approvals.pending()) == ["a1", "a2", "a3"]
    assert await store.approvals.pending(expired_before=time.time()) == []
    await store.approvals.set_prompt("a1", "p1")
    await store.approvals.add_event("a1", "refused", "bob", "not the requester")
    assert await store.approvals.decide("a1", "session", "ann") is True
    assert await store.approvals.decide("a1", "denied", "ann") is False  # (decided once)
    got = await store.approvals.get("a1")
    assert got is not None and (got.state, got.decided_by, got.prompt_message_id) == ("session", "ann", "p1")
    assert got.reasons == ["deletes files"]
    assert isinstance(await store.fetchval("SELECT decided_at FROM approvals WHERE id = 'a1'"), float)  # (its row's)
    assert await store.approvals.granted_for_session(session, "hash1", ["sandbox"], None, "telegram", "ann")
    assert not await store.approvals.granted_for_session(session, "hash1", ["unconfined"], None, "telegram", "ann")
    assert await store.approvals.decide("a2", "always", "ann", "fine", rule_scope="chat") is True
    assert await store.approvals.allowed_by_rule("command", "hash1", ["sandbox"], None, "telegram", "-5", "bob")
    assert await store.approvals.allowed_by_rule("command", "hash1", ["sandbox"], "", "telegram", "-5", "bob")
    assert not await store.approvals.allowed_by_rule("command", "hash1", ["sandbox"], None, "telegram", "-6", "bob")
    [rule] = await store.approvals.rules()
    assert (rule["scope"], rule["platform"], rule["chat_id"], rule["user_id"]) == ("chat", "telegram", "-5", "")
    assert await store.approvals.remove_rule(rule["id"]) and not await store.approvals.remove_rule(rule["id"])
    assert await store.approvals.prune(time.time() + 1) == 1  # a2; a1 is the active session's grant, a3 pending
    await store.sessions.end("telegram:-5")
    assert await store.approvals.prune(time.time() + 1) == 1
    assert await store.approvals.pending() == ["a3"]
    assert await store.fetchval("SELECT count(*) FROM approval_events") == 1  # a3's `requested`


async def test_pairing_codes_admission_and_expiry(open_store: OpenStore):
    store = await open_store()
    access = store.access
    options = {"ttl": 3600.0, "resend_after": 0.0, "max_pending": 2}
    assert await access.code_to_send("telegram", "1", "Ann", "1", new_code="AAA", **options) == ("AAA", 0)
    assert await access.code_to_send("telegram", "1", "Ann", "1", new_code="XXX", **options) == ("AAA", 0)
    assert await access.code_to_send("telegram", "1", "Ann", "1", new_code="XXX", ttl=3600.0, resend_after=3600.0,
                                     max_pending=2) == (None, 0)
    assert await access.code_to_send("telegram", "2", "Bob", "2", new_code="BBB", **options) == ("BBB", 0)
    assert await access.code_to_send("telegram", "3", "Cy", "3", new_code="CCC", **options) == ("CCC", 1)
    assert [c.code for c in await access.pending_codes()] == ["BBB", "CCC"]  # Ann's, the oldest, was dropped
    admitted = await access.admit("telegram", "BBB")
    assert admitted is not None and (admitted.user_id, admitted.user_name) == ("2", "Bob")
    assert await access.admit("telegram", "BBB") is None and await access.admit("discord", "CCC") is None
    assert await access.is_paired("telegram", "2") and not await access.is_paired("telegram", "3")
    [(platform, user_id, name, when)] = await access.paired()
    assert (platform, user_id, name) == ("telegram", "2", "Bob") and isinstance(when, float)
    assert await access.unpair("telegram", "2") and not await access.unpair("telegram", "2")
    await access.code_to_send("telegram", "4", "Di", "4", new_code="DDD", ttl=-1.0, resend_after=0.0, max_pending=5)
    assert await access.expire_codes() == 1


async def _job(store: Store, name: str, next_run_at: float | None) -> int:
    return await store.cron.add_job(name=name, prompt=f"do {name}", schedule="every 1h", timezone="UTC",
                                    target="origin", owner_platform="telegram", owner_id="1", owner_chat="1",
                                    owner_key="telegram:1", missed_policy="run_once", next_run_at=next_run_at,
                                    model=None, now=time.time())


async def test_cron_jobs_claims_runs_and_the_ledger(open_store: OpenStore):
    store = await open_store()
    now = time.time()
    job = await _job(store, "report", now - 10)
    other = await _job(store, "later", now + DAY)
    assert isinstance(job, int) and [j["name"] for j in await store.cron.jobs(("telegram", "1"))] == ["report", "later"]
    assert await store.cron.due_before(now) == [(job, now - 10)]
    await store.cron.change_job(other, {"enabled": False, "prompt": "do it later"}, now)
    changed = await store.cron.job(other)
    assert changed is not None and (changed["enabled"], changed["prompt"]) == (0, "do it later")
    assert await store.cron.due_before(now + 2 * DAY) == [(job, now - 10)]
    await store.cron.heartbeat("i1", "host", 42)
    await store.cron.heartbeat("i1", "host", 42)
    [instance] = await store.cron.instances_seen_since(now - 1)
    assert (instance["id"], instance["pid"]) == ("i1", 42)

    def decide(row: dict) -> SlotRecord:
        return SlotRecord(row["next_run_at"], True, "missed", None, [(now - 3610, "missed")], now + 3600, "running",
                          row["next_run_at"])
    claimed = await store.cron.claim_slot(job, now - 10, now, "i1", decide)
    assert claimed is not None and isinstance(claimed[1], int)
    assert await store.cron.claim_slot(job, now - 10, now, "i1", decide) is None  # not its next run any more
    [running] = await store.cron.running_runs()
    assert (running["id"], running["claimed_by"], running["pid"]) == (claimed[1], "i1", 42)
    await store.cron.finish_run(claimed[1], job, now - 10, "ok", output="done", error=None,
                                message=OutboxItem(ChatRef("telegram", "1"), "the report"))
    queued = await store.cron.queue_run(job)
    [waiting] = await store.cron.queued_runs()
    assert (waiting["run_id"], waiting["name"]) == (queued, "report")
    assert await store.cron.start_queued(queued, "i1", now) and not await store.cron.start_queued(queued, "i1", now)
    assert await store.cron.interrupt_runs([(job, queued)], "the gateway stopped", now, lambda i: True) == [(job, queued)]
    assert await store.cron.instances_seen_since(0) == []
    runs = await store.cron.runs(job)
    assert [r["state"] for r in runs] == ["interrupted", "ok", "missed"]
    assert runs[1]["delivery"] == "pending" and json.loads(runs[1]["platform_message_ids"]) == []
    assert await store.cron.prune_runs(1, ("ok", "missed", "interrupted")) == 2
    assert [r["state"] for r in await store.cron.runs()] == ["interrupted"]
    assert await store.cron.remove_job(job) and not await store.cron.remove_job(job)
    await store.cron.unregister("i1")


async def test_goals_turns_verdicts_resumes_and_the_unjudged(open_store: OpenStore):
    store = await open_store()
    origin = replace(web_message(1), text="/goal ship it")
    goal, first = await store.goals.create("web:c1", origin, "ship it", 2, "start")
    assert first is not None and isinstance(goal.id, int)
    await store.goals.set_criteria(goal.id, ["tests pass"], [("web", "v")])
    got = await store.goals.get(goal.id)
    assert got is not None and got.criteria == ["tests pass"] and got.people == (("web", "v"),)
    await store.sessions.commit_turn(await store.sessions.active("web:c1", ChatRef("web", "c1"), "dm"),
                                     [first.inbox_id], ChatRef("web", "c1"), "u",
                                     [{"role": "assistant", "content": "working"}], None)
    [unjudged] = await store.goals.unjudged()
    assert (unjudged.goal.id, unjudged.turn.inbox_id, unjudged.turn_state) == (goal.id, first.inbox_id, "done")
    assert [m["content"] for m in await store.goals.turn_messages(first.inbox_id)] == ["working"]
    settled = await store.goals.settle(goal, 1, state="exhausted", reason="out of turns", turns=2, next_seq=1,
                                       notice=OutboxItem(ChatRef("web", "c1"), "I stopped"))
    assert settled == (True, None) and await store.goals.unjudged() == []
    exhausted = await store.goals.open_goal("web:c1")
    assert exhausted is not None and (exhausted.state, exhausted.reason) == ("exhausted", "out of turns")
    resumed, turn = await store.goals.resume(exhausted, max_turns=4, seq=2, next_turn="go on", counted=("web", "u"),
                                             max_resumes=1)
    assert resumed and turn is not None and await store.goals.turn_state(goal, 2) == "received"
    assert await store.goals.resume(exhausted, max_turns=6, seq=3, next_turn="more", counted=("web", "u"),
                                    max_resumes=1) == (False, None)  # once a day
    paused = await store.goals.set_state("web:c1", ("active",), "paused", "by hand")
    assert paused is not None and paused.state == "paused"
    assert await store.goals.set_state("web:c1", ("active",), "paused", "again") is None
    latest = await store.goals.latest("web:c1")
    assert latest is not None and (latest.id, latest.max_turns, latest.seq) == (goal.id, 4, 2)


async def test_subagent_runs_their_transcripts_and_pruning(open_store: OpenStore):
    store = await open_store()
    parent = await store.sessions.active("web:c1", ChatRef("web", "c1"), "dm")
    done = await store.subagents.started(parent, None, 1, "look it up", "web", "c1", None)
    cut = await store.subagents.started(parent, None, 1, "and this", "web", "c1", None)
    session = await store.subagents.session(done)
    assert isinstance(done, int) and isinstance(session, int)
    await store.subagents.finished(done, "done", [{"role": "user", "content": "look it up"},
                                                  {"role": "assistant", "content": "found it"}], "found it")
    await store.subagents.interrupted()
    states = {r["id"]: r["state"] for r in await store.fetch("SELECT id, state FROM subagent_runs")}
    assert states == {done: "done", cut: "interrupted"}
    assert [m["content"] for m in await store.sessions.history(session)] == ["look it up", "found it"]
    assert await store.subagents.prune(time.time() - DAY) == 0
    assert await store.subagents.prune(time.time() + 1) == 2
    assert await store.subagents.session(done) is None


async def test_learning_counters_skills_and_curator_runs(open_store: OpenStore):
    store = await open_store()
    learning = store.learning
    session = await store.sessions.active("web:c1", ChatRef("web", "c1"), "dm")
    assert await learning.keep_prompt(session, "frozen") == "frozen"
    assert await learning.keep_prompt(session, "another") == "frozen" and await learning.keep_prompt(999, "x") is None
    counts = [learning.turn_count(session, 3, memory_every=2, skill_every=10) for _ in range(2)]
    for count in counts:
        await store.write(count)
    assert [(c.memory_due, c.skill_due) for c in counts] == [(False, False), (True, False)]
    assert await learning.counters(session) == (0, 6)
    await learning.skill_written("deploy", "agent")
    await learning.skill_written("deploy", "review")
    await learning.skill_viewed("deploy")
    await learning.skill_viewed("by-hand")
    await learning.set_skill_state("deploy", "stale")
    await learning.pin_skill("deploy", True)
    skills = await learning.skills()
    deploy = skills["deploy"]
    assert (deploy["provenance"], deploy["updated_by"], deploy["views"], deploy["state"], deploy["pinned"]) == \
        ("agent", "review", 1, "stale", 1)
    assert skills["by-hand"]["provenance"] == "user" and isinstance(deploy["last_used_at"], float)
    now = time.time()
    assert await learning.first_started_at(now) == now and await learning.first_started_at(now + 5) == now
    await learning.run_started("r1", now - 10, False, "schedule")
    await learning.run_started("r2", now, True, "manual")
    assert await learning.recorded_runs() == {"r1": False, "r2": False}
    await learning.run_finished("r1", now - 5, [{"skill": "deploy", "to": "stale"}], None)
    assert await learning.last_applied_run_start() == now - 10 and await learning.last_applied_run() == "r1"
    assert [(r["id"], r["dry_run"]) for r in await learning.curator_runs()] == [("r2", 1), ("r1", 0)]
    await learning.forget_runs(["r1", "r2"])
    assert await learning.curator_runs() == [] and await learning.last_applied_run() is None
    assert await learning.job_prompts() == []


async def test_usage_by_loop_by_day_top_sessions_and_roll_up(open_store: OpenStore):
    store = await open_store()
    session = await store.sessions.active("web:c1", ChatRef("web", "c1"), "dm")
    now = time.time()
    old = now - 3 * DAY
    for at, loop in ((old, "main"), (old, "review"), (now, "main")):
        store.usage.record(at, loop, session, "web", "u", "m", 100, 10)
    await store.inbox.add(web_message(1), "k")  # (the usage rides with this commit)
    before = await store.usage.by_loop(since=old - DAY)
    assert before == {"main": {"requests": 2, "prompt": 200, "completion": 20},
                      "review": {"requests": 1, "prompt": 100, "completion": 10}}
    assert all(type(n) is int for sums in before.values() for n in sums.values())
    assert await store.usage.roll_up(now - DAY) == 2
    assert await store.usage.by_loop(since=old - DAY) == before  # the same figures from the daily sums
    assert await store.usage.by_loop(person=("web", "u"), session_id=session) == before
    days = await store.usage.by_day(old - DAY)
    assert [(d["requests"], d["prompt"]) for d in days] == [(2, 200), (1, 100)]
    assert all(type(d["requests"]) is int and isinstance(d["day"], str) and len(d["day"]) == 10 for d in days)
    [top] = await store.usage.top_sessions(old - DAY)
    assert (top["session_id"], top["key"], top["tokens"], top["requests"]) == (session, "web:c1", 330, 3)
    assert type(top["tokens"]) is int and type(top["requests"]) is int
