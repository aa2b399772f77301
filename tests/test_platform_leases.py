"""Platform leases: the storage group (gateway.storage.leases) on both engines, and a connection that must be
single held by one of two gateways' `Connections` at a time (gateway.connections, gateway.leases), with a plain
adapter in place of a platform. Two real instances polling one fake Telegram: test_leader_e2e.py."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
from pathlib import Path
from typing import AsyncIterator

import pytest

from gateway.connections import Connections
from gateway.cron.ledger import RunLedger, instance_gone, machine, new_instance_id
from gateway.leases import PlatformLeases
from gateway.storage import Store
from platforms.base import Capabilities
from tests.test_connections import Flaky
from tests.harness import eventually
from tests.pg import fresh_database


@pytest.fixture(params=["sqlite", "postgres"])
async def url(request: pytest.FixtureRequest) -> AsyncIterator[str | None]:
    """None: SQLite in the test's tmp_path; else a PostgreSQL database of the test's own."""
    if request.param == "sqlite":
        yield None
        return
    async with fresh_database() as url:
        yield url


async def open_store(tmp_path: Path, url: str | None) -> Store:
    return await Store.open(tmp_path / "state.db", url=url)


async def test_a_lease_is_one_holders_until_released_or_ended(tmp_path: Path, url: str | None):
    store, other = await open_store(tmp_path, url), await open_store(tmp_path, url)  # (two connections)
    try:
        leases = store.leases
        assert await leases.take("telegram", "a", 30)
        assert not await other.leases.take("telegram", "b", 30)
        assert await leases.take("telegram", "a", 30)  # renewed
        assert await other.leases.take("discord", "b", 30)  # another platform's is another lease
        held = await other.leases.held()
        assert [(h["platform"], h["holder"]) for h in held] == [("discord", "b"), ("telegram", "a")]
        assert all(25 < h["left"] <= 30 for h in held)
        assert not await other.leases.release("telegram", "b")  # not b's to release
        assert await leases.release("telegram", "a")
        assert await other.leases.take("telegram", "b", -1)  # free: taken (with a lease that has already ended)
        assert [h["platform"] for h in await leases.held()] == ["discord"]  # an ended lease is not held
        assert await leases.take("telegram", "a", 30)  # ended: anyone's
        assert not await other.leases.take("telegram", "b", 30, replacing="c")  # c is not the holder
        assert await other.leases.take("telegram", "b", 30, replacing="a")  # a is known gone: replaced
    finally:
        await store.close()
        await other.close()


async def test_of_two_taking_at_once_exactly_one_holds_it(tmp_path: Path, url: str | None):
    stores = [await open_store(tmp_path, url) for _ in range(4)]
    try:
        for _ in range(5):
            taken = await asyncio.gather(*(s.leases.take("telegram", f"h{i}", 30) for i, s in enumerate(stores)))
            assert sum(taken) == 1
            winner = taken.index(True)
            assert await stores[winner].leases.release("telegram", f"h{winner}")
    finally:
        for store in stores:
            await store.close()


class Poller(Flaky):
    """A connection the platform allows once, which connects at its first try (`tries`: its starts)."""

    name = "poller"
    capabilities = Capabilities(single_connection=True)

    def __init__(self) -> None:
        super().__init__(failures=0)


async def _gateway(store: Store, **timing: float) -> tuple[Connections, Poller]:
    """A gateway's connections of one poller (registered as a live instance: in this process, an instance
    that is not is taken for one that has exited, whose lease is taken over at once)."""
    poller = Poller()
    connections = Connections([poller], lambda adapter: asyncio.sleep(0))
    instance = RunLedger(store.cron, new_instance_id())
    await instance.register()
    connections.begin(PlatformLeases(store.leases, instance.instance_id, **timing))
    assert await connections.first_tries(5) == []
    return connections, poller


async def test_one_of_two_gateways_holds_the_connection_and_the_other_takes_over_at_its_stop(
        tmp_path: Path, url: str | None):
    stores = [await open_store(tmp_path, url) for _ in range(2)]
    try:
        first, a = await _gateway(stores[0], renew_every=0.05, standby_every=0.05)
        second, b = await _gateway(stores[1], renew_every=0.05, standby_every=0.05)
        assert (a.health.state, b.health.state) == ("ready", "standby")
        assert b.health.error == "another instance holds this connection" and b.tries == 0
        await first.stop()  # stopped, then released: the standby takes over at its next try
        assert a.stops == 1 and a.health.state == "stopped"
        await eventually(lambda: b.ready, 5, "the standby taking over")
        assert b.tries == 1
        [lease] = await stores[0].leases.held()
        assert lease["holder"] == second.leases.holder  # type: ignore[union-attr]
        await second.stop()
        assert await stores[0].leases.held() == []
    finally:
        for store in stores:
            await store.close()


async def test_a_holder_that_loses_its_lease_stops_at_once(tmp_path: Path, url: str | None):
    store = await open_store(tmp_path, url)
    try:
        connections, poller = await _gateway(store, renew_every=0.05, standby_every=0.05)
        assert poller.ready
        holder = connections.leases.holder  # type: ignore[union-attr]
        await store.execute("UPDATE platform_leases SET holder = 'elsewhere:1:ab' WHERE holder = ?", holder)
        await eventually(lambda: poller.health.state == "standby", 5, "the holder stopping")
        assert poller.stops == 1  # (then it stands by: stopped for the loss, or at its next try another holds it)
        assert poller.health.error in ("stopped: another instance took the lease",
                                       "another instance holds this connection")
        await store.execute("DELETE FROM platform_leases")  # the other instance stopped
        await eventually(lambda: poller.ready, 5, "taking the connection again")
        assert poller.tries == 2
        await connections.stop()
    finally:
        await store.close()


async def test_a_holder_whose_renewals_go_unanswered_stops_before_its_lease_ends(tmp_path: Path, url: str | None):
    """The database unreachable (here: a renewal that never comes back): the connection stops by the holder's
    own clock, before another instance could take the lease."""
    store = await open_store(tmp_path, url)
    try:
        connections, poller = await _gateway(store, seconds=1.0, renew_every=0.05, margin=0.5)
        leases = connections.leases
        assert leases is not None and poller.ready
        never = asyncio.Event()

        async def unanswered(*args: object, **kwargs: object) -> bool:
            await never.wait()
            return True
        leases.store.take = unanswered  # type: ignore[method-assign]
        await eventually(lambda: poller.health.state != "ready", 5, "the holder stopping")
        [lease] = await store.leases.held()  # it stopped while its lease still held: nobody else polls yet
        assert lease["holder"] == leases.holder and lease["left"] > 0
        assert poller.stops == 1
        assert "could not be renewed in time" in (poller.health.error or "")
        await connections.stop()
    finally:
        await store.close()


async def test_a_lease_whose_holder_has_exited_on_this_machine_is_taken_at_once(tmp_path: Path, url: str | None):
    """A daemon restarted after kill -9 (one SQLite home, or an instance on this machine) connects at once,
    without waiting for the dead one's lease to end."""
    exited = subprocess.Popen([sys.executable, "-c", "pass"])
    exited.wait()
    store = await open_store(tmp_path, url)
    try:
        assert await store.leases.take("poller", f"{machine()}:{exited.pid}:dead", 30)
        connections, poller = await _gateway(store)
        assert poller.ready
        [lease] = await store.leases.held()
        assert lease["holder"] == connections.leases.holder  # type: ignore[union-attr]
        await connections.stop()
    finally:
        await store.close()


async def test_on_a_database_of_its_own_the_lease_is_taken_at_once_and_never_lost(tmp_path: Path):
    """SQLite: one daemon per home. The lease is recorded (for `chatgate status`), not contested: taken without
    waiting for the database, over a killed daemon's, never renewed, and a database that does not answer
    (another program holding its write lock) never stops the connection."""
    store = await open_store(tmp_path, None)
    try:
        assert not store.shared
        assert await store.leases.take("poller", "this-home:1:killed", 30)
        poller = Poller()
        connections = Connections([poller], lambda adapter: asyncio.sleep(0))
        leases = PlatformLeases(store.leases, new_instance_id(), renew_every=0.01, seconds=0.2, margin=0.1,
                                shared=False)
        connections.begin(leases)
        assert await connections.first_tries(5) == [] and poller.ready
        async def recorded() -> bool:
            return [h["holder"] for h in await store.leases.held()] == [leases.holder]
        await eventually(recorded, 5, "the lease recorded over the killed daemon's")
        never = asyncio.Event()

        async def unanswered(db: object) -> None:
            await never.wait()
        batches = store.batches
        store.db.later(unanswered)  # (the group commit waits: nothing can be written)
        await asyncio.sleep(0.5)  # longer than the lease: nothing may stop the connection
        assert poller.ready and poller.stops == 0
        assert store.batches <= batches + 1  # (the one waiting): no renewals
        never.set()
        await connections.stop()
    finally:
        await store.close()


def test_an_instance_of_another_container_with_this_host_name_is_never_taken_for_exited():
    """Two containers with one host name (host networking, a `hostname:` set alike) must not find each other's
    pids "gone" here (each would drop the other's leases and run its turns): the pid namespace is in the id."""
    me = new_instance_id()
    exited = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                            text=True, check=True)
    pid = int(exited.stdout)
    assert instance_gone(f"{machine()}:{pid}:abcd", me)  # this machine, its process gone
    assert not instance_gone(f"{socket.gethostname()}~ffff:{pid}:abcd", me)  # another pid namespace, one host name
    assert not instance_gone(f"{socket.gethostname()}:{pid}:abcd", me)  # an id of an older chatgate: not known
    assert not instance_gone(me, me)
