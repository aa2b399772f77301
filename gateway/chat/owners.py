"""Which instance runs each conversation, when several instances share one database (`Store.shared`).

A conversation's messages run on the instance that owns it (gateway.storage.owners), one turn at a time, in
order, as on one instance. A message is stored on whichever instance the platform reached, then handed
(`hand`): the instance claims the conversation and runs it, or — when another instance owns it — leaves it
to that owner, which finds it at its next look (`POLL_SECONDS`) and runs it after the turn under way: `queue`,
`interrupt`, `steer`, `/stop` act there, where the turn runs. An owner gives a conversation up once nothing
of it is left unfinished and no reply of it waits to be sent (the next answer, run elsewhere, would overtake it).

An instance owns conversations only while its life lease (gateway.leases.LifeLease) can be counted on. When
an instance dies (kill -9, power loss, a network cut) its lease ends, and another instance takes its
conversations over at its next look, with today's crash rules for what was left unfinished (run again when
nothing was sent; otherwise the chat is told it was interrupted): within LIFE_SECONDS + POLL_SECONDS of the
last renewal, or at once when the dead instance ran on the same machine (its process is seen to have exited).
An instance that cannot renew its lease lets every turn go before the lease could have ended, so that no turn
runs on two instances, and takes conversations again once it is renewed.

On a database no other instance uses (SQLite) nothing of this runs: the start takes up every unfinished
message and every message runs where it arrived.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Mapping

from gateway.cron.ledger import instance_gone
from gateway.storage.database import StorageError
from gateway.storage.notices import LOOK, listen, notify
from gateway.storage.owners import claiming
from platforms.loops import start_supervised, wait_event

if TYPE_CHECKING:
    from gateway.chat.sessions import Sessions, WorkItem
    from gateway.leases import LifeLease
    from gateway.storage.inbox import InboxStore, Unfinished
    from gateway.storage.owners import OwnerStore
    from platforms.base import InboundMessage, PlatformAdapter

log = logging.getLogger(__name__)

POLL_SECONDS = 1.0


class Owners:
    """This instance's (`holder`'s) side: what it hands to its sessions, and what it takes over."""

    def __init__(self, store: "OwnerStore", inbox: "InboxStore", sessions: "Sessions", life: "LifeLease", *,
                 adapters: Mapping[str, "PlatformAdapter"], spawn: Callable[..., Any],
                 adopt: Callable[[], Awaitable[None]] | None = None) -> None:
        self.store, self.inbox, self.sessions, self.life = store, inbox, sessions, life
        self.adapters = adapters  # a conversation is taken up only where its platform is ready
        self.holder, self.shared = life.holder, life.shared
        self.spawn = spawn  # a background task the runner keeps
        self.adopt = adopt  # at each look: the replies no live instance sends, that this one can (`Delivery.adopt`)
        self.known: set[int] = set()  # inbox ids dispatched here that may still be unfinished in the database
        life.when_lost(self._let_go)
        self._dispatch: Callable[["WorkItem"], None] | None = None  # `Inbound.dispatch`
        self._item: Callable[["Unfinished"], "WorkItem"] | None = None  # `Inbound.resumed_item`
        self._watching: list[asyncio.Task[None]] = []
        self._nudged = asyncio.Event()  # another instance left work here (a notice): look now

    def serve(self, dispatch: Callable[["WorkItem"], None], item: Callable[["Unfinished"], "WorkItem"]) -> None:
        self._dispatch, self._item = dispatch, item

    # -- handing messages ----------------------------------------------------------------------------------

    async def store_message(self, msg: "InboundMessage", key: str) -> tuple[int | None, bool | None]:
        """Store an accepted message: its id (None: stored already), and — with others — whether its conversation
        is this instance's, claimed in the same write, so that no other instance finds it unowned (None: not
        tried, the only instance or one whose life lease cannot be counted on)."""
        if not self.shared or not self.life.counted_on():
            return await self.inbox.add(msg, key), None
        return await self.inbox.add_claimed(msg, key, claiming(key, self.holder))

    async def hand(self, item: "WorkItem", *, owned: bool | None = None) -> None:
        """Run a stored message here, if this instance owns (or can claim) its conversation; else its owner will
        (told at once). `owned`: what its storing found (None: not known)."""
        assert self._dispatch is not None, "Owners.serve first"
        if item.inbox_id in self.known:  # (taken up already: by the start, or a look at the database)
            return
        if self.shared:
            if not self.life.counted_on() or not self.sessions.accepting():
                return
            if owned is None:
                try:
                    owned = await self.store.claim(item.key, self.holder)
                except StorageError as exc:  # (it is stored: the next look takes it up, here or on its owner)
                    log.warning("could not claim the conversation %s (%s); its message runs from the next look",
                                item.key, exc)
                    return
            if not owned:
                await notify(self.store.db, LOOK)  # (the owner looks now, not at its next poll)
                return
            if item.inbox_id in self.known or not self.life.counted_on():  # (or let go meanwhile: a look after
                return  # the renewal takes it up)
            self.known.add(item.inbox_id)
        self._dispatch(item)

    def goal_turn(self, item: "WorkItem") -> None:
        """A goal's next turn, stored: it runs in its conversation's queue, on the instance that owns it."""
        if not self.shared:
            self.sessions.queue_goal_turn(item)
        else:
            self.spawn(self.hand(item), name="goal-turn")

    # -- start and stop -----------------------------------------------------------------------------------

    async def start(self) -> None:
        """Take up what an earlier run left unfinished: every unfinished message on a database of its own;
        with others, those of conversations no live instance owns (then keep looking, and keep the lease)."""
        if not self.shared:
            found = await self.inbox.unfinished()
            if found:
                log.info("resuming %d unfinished message(s)", len(found))
            self._take_up(found)
            return
        await self.life.start()
        await self.look()
        self._watching = [start_supervised("conversation-owners", self._watch),
                          asyncio.create_task(listen(self.store.db, LOOK, self._nudged.set), name="notices")]

    async def stop(self) -> None:
        """After the sessions drained: give the conversations up (another instance takes up at once what this
        one left unfinished), but those with a reply waiting, which stay this instance's until the outbox's
        last flush (`LifeLease.stop`, after `Delivery.stop`: its sends need the life lease)."""
        for task in self._watching:
            task.cancel()
        await asyncio.gather(*self._watching, return_exceptions=True)
        if self._watching:
            self._watching = []
            await self.store.give_up(self.holder)

    # -- looking at the database ---------------------------------------------------------------------------

    async def look(self) -> None:
        """Claim the conversations no live instance owns (of the platforms ready here: a standby of a connection
        another instance holds could not answer); run what this instance owns and has not taken up; give up
        what it owns and has nothing left of. And send the replies no live instance sends (`adopt`)."""
        await self._drop_exited()
        if self.adopt is not None:
            await self.adopt()
        orphaned = [key for key, platform in await self.store.orphaned()
                    if (adapter := self.adapters.get(platform)) is not None and adapter.ready]
        for key in orphaned:
            await self.store.claim(key, self.holder)
        before = set(self.known)
        keys, rows = await self.store.owned(self.holder)
        unfinished = {u.inbox_id for u in rows}
        self.known -= before - unfinished  # (finished: they never come back)
        if not self.life.counted_on():  # (let go while it waited: renewed, a look takes them up)
            return
        new = [u for u in rows if u.inbox_id not in self.known]
        if new and orphaned:
            log.info("taking up %d unfinished message(s) of %d conversation(s) no instance ran",
                     len(new), len(orphaned))
        self._take_up(new)
        busy = {u.session_key for u in rows} | {key for key, w in self.sessions.workers.items() if w.busy or w.queue}
        if idle := [key for key in keys if key not in busy]:
            await self.store.release(idle, self.holder)

    async def _drop_exited(self) -> None:
        """End the life lease of an instance whose process is seen to have exited (it ran on this machine)."""
        for holder in await self.store.lives():
            if instance_gone(holder, self.holder):
                log.info("instance %s has exited: taking up its conversations and replies", holder)
                await self.store.drop(holder)

    def _take_up(self, found: list["Unfinished"]) -> None:
        assert self._dispatch is not None and self._item is not None, "Owners.serve first"
        for u in found:
            self.known.add(u.inbox_id)
            self._dispatch(self._item(u))

    async def _watch(self) -> None:
        while True:
            await wait_event(self._nudged, POLL_SECONDS)
            self._nudged.clear()
            if self.life.counted_on() and self.sessions.accepting():
                try:
                    await self.look()
                except StorageError as exc:
                    log.warning("looking for conversations to take up failed: %s", exc)

    def _let_go(self) -> None:
        """Stop every turn and forget every waiting message: what is unfinished stays in the database."""
        for worker in list(self.sessions.workers.values()):
            worker.queue.clear()
            worker.steered.clear()
            worker.cancel_turn("shutdown")
        self.known.clear()
