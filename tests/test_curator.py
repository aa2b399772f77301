"""The curator on a fake clock: when it runs (interval, idleness, first-run deferral), what it
touches (stale → archived for agent and review skills only), dry runs, snapshots and restore."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from agent.llm import LLMClient, LLMSettings
from agent.loop import Agent
from agent.documents import FolderDocuments
from agent.skills import SkillLibrary
from gateway import cli
from gateway.learning.consolidate import CONSOLIDATE_IDENTITY, consolidator
from gateway.learning.curator import Curator
from gateway.storage import Store
from tests.engines import OpenStore
from tests.fakes.llm import Reply
from tests.pg import pg_url  # noqa: F401  (a fixture)

DAY, HOUR = 86400.0, 3600.0
T0 = time.time()


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


class Activity:
    """What the gateway reports: None while busy, else since when it has been idle."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.busy = False
        self.last = clock.now

    async def __call__(self) -> float | None:
        return None if self.busy else self.last


@pytest.fixture
async def store(open_store: OpenStore) -> Store:
    """The curator's store, on each engine (tests.engines)."""
    return await open_store()


def make(tmp_path: Path, store: Store, clock: Clock, activity: Activity | None = None) -> Curator:
    return Curator(store.learning, SkillLibrary(FolderDocuments(tmp_path), store.learning), tmp_path, idle_since=activity, clock=clock)


async def add_skill(curator: Curator, name: str, provenance: str, *, age_days: float) -> None:
    await curator.skills.create(name, f"how to {name}", f"Steps for {name}.", provenance=provenance)
    at = curator.clock() - age_days * DAY
    await curator.learning.execute("UPDATE skills SET created_at = ?, updated_at = ?, last_used_at = ? WHERE name = ?",
                                   at, at, at, name)


async def test_first_run_waits_one_interval_and_then_only_for_real_idleness(tmp_path, store):
    clock = Clock()
    activity = Activity(clock)
    curator = make(tmp_path, store, clock, activity)
    await curator.first_started()
    clock.now += 100 * HOUR
    assert await curator.tick() is None  # not due: the first run comes one interval after first start
    clock.now = T0 + 168 * HOUR + 1
    activity.busy = True
    assert await curator.tick() is None  # due, but a turn is running
    activity.busy, activity.last = False, clock.now - 1 * HOUR
    assert await curator.tick() is None  # due, but idle for only an hour
    activity.last = clock.now - 2 * HOUR - 1
    first = await curator.tick()
    assert first is not None and (tmp_path / "logs/curator" / first.id / "REPORT.md").is_file()
    clock.now += 24 * HOUR
    activity.last = clock.now - 10 * HOUR
    assert await curator.tick() is None  # ran a day ago: next one a week after that
    clock.now += 168 * HOUR
    activity.last = clock.now - 3 * HOUR
    assert await curator.tick() is not None


async def test_stale_then_archived_and_what_is_never_touched(tmp_path, store):
    clock = Clock()
    curator = make(tmp_path, store, clock)
    await add_skill(curator, "old-agent", "agent", age_days=40)
    await add_skill(curator, "ancient-review", "review", age_days=100)
    await add_skill(curator, "fresh-agent", "agent", age_days=3)
    await add_skill(curator, "users-own", "user", age_days=400)
    await add_skill(curator, "pinned-one", "agent", age_days=400)
    await add_skill(curator, "bundled-one", "bundled", age_days=400)
    await add_skill(curator, "nightly-digest", "agent", age_days=400)
    await curator.learning.pin_skill("pinned-one", True)
    await store.execute(
        "INSERT INTO cron_jobs (name, prompt, schedule, timezone, target, owner_platform, owner_id,"
        " created_at, updated_at) VALUES ('d', 'Follow the nightly-digest skill', 'every 1d', 'UTC',"
        " 'none', 'cli', 'op', 0, 0)")
    hand_made = tmp_path / "skills" / "by-hand" / "SKILL.md"
    hand_made.parent.mkdir(parents=True)
    hand_made.write_text("---\nname: by-hand\ndescription: written by a person\n---\nSteps.\n")

    run = await curator.run()
    assert {(c.skill, c.after) for c in run.changes} == {("old-agent", "stale"), ("ancient-review", "archived")}
    meta = await curator.learning.skills()
    assert meta["old-agent"]["state"] == "stale" and meta["ancient-review"]["state"] == "archived"
    assert await curator.skills.archived() == ["ancient-review"]
    assert {s.name for s in await curator.skills.all()} == {"old-agent", "fresh-agent", "users-own", "pinned-one",
                                                      "bundled-one", "nightly-digest", "by-hand"}
    assert (tmp_path / "logs/curator" / run.id / "snapshot" / "ancient-review" / "SKILL.md").is_file()

    await curator.skills.view("old-agent")  # used again: active, and the clock starts over
    clock.now += 60 * DAY
    second = await curator.run()
    assert {(c.skill, c.after) for c in second.changes} == {("old-agent", "stale"), ("fresh-agent", "stale")}


async def test_dry_run_changes_nothing_and_restore_brings_a_snapshot_back(tmp_path, store):
    clock = Clock()
    curator = make(tmp_path, store, clock)
    told: list[str] = []

    async def notify(text: str) -> None:
        told.append(text)

    curator.notify = notify
    await add_skill(curator, "ancient", "agent", age_days=100)
    dry = await curator.run(dry_run=True)
    assert [(c.skill, c.after) for c in dry.changes] == [("ancient", "archived")]
    assert await curator.skills.get("ancient") is not None and await curator.skills.archived() == []
    assert not (tmp_path / "logs/curator" / dry.id / "snapshot").exists()
    assert "dry run" in dry.report.read_text()
    assert await curator.next_due() == (await curator.first_started()) + 168 * HOUR  # a dry run is not a run

    assert told == []  # a dry run tells nobody
    applied = await curator.run()
    assert await curator.skills.get("ancient") is None
    assert told == [f"🧹 Skill curator run {applied.id}: 0 marked stale, 1 archived (restorable: chatgate curator "
                    f"restore {applied.id}). Report: {applied.report}"]
    await curator.restore(applied.id)
    assert await curator.skills.get("ancient") is not None and await curator.skills.archived() == []
    assert (await curator.learning.skills())["ancient"]["state"] == "active"
    with pytest.raises(ValueError, match="no snapshot"):
        await curator.restore("../../etc")


async def test_only_the_last_snapshots_are_kept(tmp_path, store):
    clock = Clock()
    curator = make(tmp_path, store, clock)
    curator.keep = 2
    for n in range(4):
        await add_skill(curator, f"old-{n}", "agent", age_days=100)
        await curator.run()
        clock.now += 1
    runs = sorted(p.name for p in (tmp_path / "logs/curator").iterdir())
    assert len(runs) == 4 and all((tmp_path / "logs/curator" / r / "REPORT.md").is_file() for r in runs)
    assert sorted(p.parent.name for p in (tmp_path / "logs/curator").glob("*/snapshot")) == runs[-2:]


def test_cli_skills_and_curator(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("CHATGATE_HOME", str(tmp_path))
    skill = tmp_path / "skills" / "notes" / "SKILL.md"
    skill.parent.mkdir(parents=True)
    skill.write_text("---\nname: notes\ndescription: keep notes tidy\n---\nSteps.\n")
    assert cli.main(["skills", "list"]) == 0
    assert "notes — keep notes tidy [user, active" in capsys.readouterr().out
    assert cli.main(["skills", "pin", "notes"]) == 0
    assert cli.main(["skills", "archive", "notes"]) == 0
    assert cli.main(["skills", "show", "notes"]) == 1
    assert "no skill 'notes'" in capsys.readouterr().err
    assert cli.main(["skills", "restore", "notes"]) == 0
    assert cli.main(["curator", "run", "--dry-run"]) == 0
    assert "no changes" in capsys.readouterr().out
    assert cli.main(["curator", "status"]) == 0
    out = capsys.readouterr().out
    assert "next run due" in out and "dry run (cli): 0 change(s)" in out
    assert cli.main(["curator", "restore", "nope"]) == 1


async def test_the_llm_pass_merges_only_skills_the_curator_may_touch(tmp_path, store, llm):
    clock = Clock()
    curator = make(tmp_path, store, clock)
    client = LLMClient(LLMSettings(model="m", base_url=llm.base_url, api_key="k", max_retries=0))
    curator.consolidate = consolidator(Agent(client, identity=CONSOLIDATE_IDENTITY, max_iterations=8), curator.skills)
    await add_skill(curator, "deploy-web", "agent", age_days=1)
    await add_skill(curator, "deploy-website", "review", age_days=1)
    await add_skill(curator, "my-deploy", "user", age_days=1)
    merged = {"action": "create", "name": "deploy-site", "description": "Deploy the web site",
              "body": "1. Build.\n2. Upload."}
    llm.script(
        Reply.tool_calls([("skill_manage", {"action": "edit", "name": "my-deploy", "body": "taken over"}),
                          ("skill_manage", merged)]),
        Reply.tool_calls([("skill_manage", {"action": "archive", "name": "deploy-web"}),
                          ("skill_manage", {"action": "archive", "name": "deploy-website"}),
                          ("skill_manage", {"action": "archive", "name": "my-deploy"})]),
        Reply.text("merged deploy-web and deploy-website into deploy-site"))
    try:
        run = await curator.run()
    finally:
        await client.aclose()
    offered = {t["function"]["name"] for t in llm.requests[0]["tools"]}
    assert offered == {"skills_list", "skill_view", "skill_manage"}
    assert "deploy-web, deploy-website" in llm.requests[0]["messages"][-1]["content"]
    results = [m["content"] for m in llm.requests[2]["messages"] if m["role"] == "tool"]
    assert results[2:] == ["Archived skill deploy-web (restorable).", "Archived skill deploy-website (restorable).",
                           "error: 'my-deploy' is not one of the skills this pass may change"]
    assert "not one of the skills" in llm.requests[1]["messages"][-2]["content"]  # the edit of the user's skill
    assert {s.name for s in await curator.skills.all()} == {"deploy-site", "my-deploy"}
    assert (await curator.skills.get("my-deploy")).body.strip() == "Steps for my-deploy."
    assert (tmp_path / "logs/curator" / run.id / "snapshot" / "deploy-web").is_dir()
    assert "merged deploy-web and deploy-website into deploy-site" in run.report.read_text()


async def test_two_instances_due_at_once_run_the_pass_once(tmp_path, pg_url):  # noqa: F811
    """Several instances on one PostgreSQL database: both ticks find the pass due and idle; one runs it, the
    other finds it taken (the claims go one at a time) and runs nothing."""
    stores = [await Store.open(tmp_path / name / "state.db", url=pg_url) for name in ("a", "b")]
    try:
        clock = Clock()
        curators = [Curator(s.learning, SkillLibrary(s.documents, s.learning), tmp_path / name, clock=clock,
                            idle_since=Activity(clock)) for s, name in zip(stores, ("a", "b"))]
        await curators[0].first_started()
        await add_skill(curators[0], "old-agent", "agent", age_days=40)
        clock.now = T0 + 168 * HOUR + 1
        for curator in curators:
            curator.idle_since.last = clock.now - 3 * HOUR  # type: ignore[union-attr]
        runs = await asyncio.gather(*(c.tick() for c in curators))
        assert len([r for r in runs if r is not None]) == 1
        [ran] = [r for r in runs if r is not None]
        assert [c.skill for c in ran.changes] == ["old-agent"]
        assert [r["id"] for r in await stores[0].learning.curator_runs()] == [ran.id]
    finally:
        for store in stores:
            await store.close()
