"""Learning in the gateway: each session's frozen prompt block, review counters, the review fork.

* **Frozen block.** When a session takes its first turn, the memory snapshot and the skill index
  are rendered once and kept with the session (`LearningStore.keep_prompt`); every later turn — also
  after a restart — sends the same system prompt, so providers' prompt caches keep hitting.
  A person's profile is only in the block of a session that is theirs alone (a DM, or their own
  session in a group), never in a shared group or thread session.
* **Counters** (per session, in the database so restarts keep them: `gateway.storage.learning`): user
  turns since the last memory review, tool iterations since the last skill review.
* **The review fork.** When a counter reaches its threshold, after the reply was delivered, a
  background task (bounded by `review.max_concurrent`) runs a separate agent over a snapshot of
  the transcript with only the learning tools (the registry refuses any other call), at most
  `review.max_iterations` steps, writing with provenance "review". It is not a session: it has
  no counters and is never reviewed itself.
* **Whose words.** A review acts for everyone whose messages are in the transcript it reads, not for
  whoever spoke last: it is trusted only if all of them are (`gateway.access.trust`: as the least
  trusted, so an untrusted member's shared notes and skills wait for an admin), and with several
  people in it, it keeps no notes about one person and reads nobody's profile.
* **When.** A review waits until its conversation pauses (`review.after_pause_seconds` without a
  finished turn, at most `MAX_PAUSE_WAIT`): run beside the next turn, it delayed that reply (the
  slowest replies of a fast conversation were the ones after a review), and a review that waits
  reads the whole burst at once.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING

from agent import usage as usage_scope
from agent.tools.learning import TOOLSET
from agent.loop import Agent
from agent.memory import Memory
from agent.skills import SkillLibrary
from agent.tools import ToolContext, ToolRegistry
from gateway.access.trust import Trust
from gateway.chat.delivery import Delivery
from gateway.storage.learning import LearningStore
from gateway.storage.sessions import SessionStore
from gateway.storage.learning import TurnCount
from platforms.loops import finish_or_cancel
from platforms.base import ChatRef

if TYPE_CHECKING:
    from gateway.config import ReviewConfig

log = logging.getLogger(__name__)

REVIEW_IDENTITY = """You are reviewing a conversation you (the assistant) just had, to learn from it. \
You cannot talk to anyone; you can only use the memory and skill tools.

Memory review: is there something about the person (target user) or a durable fact for all your \
conversations (target memory) worth keeping? Keep entries short; replace or remove outdated ones \
instead of piling up; consolidate when space runs out.

Skill review: did the conversation show a procedure that will come up again? Prefer patching an \
existing skill (skills_list, skill_view, then skill_manage patch) to creating a new one; write \
class-level procedures ("how to cut a release of a Python package"), not the story of this one task.

Never learn: transient failures (a timeout, a flaky network, a service that was down), missing \
credentials or configuration, one-off narratives, secrets of any kind, or broad prohibitions drawn \
from a single bad run.

When nothing is worth keeping, change nothing. Finish with one short line saying what you kept, \
or "nothing to keep"."""


MAX_WAITING_REVIEWS = 256  # reviews queued or running at once; more are skipped (and logged)
MAX_PAUSE_WAIT = 60.0  # the longest a review waits for its conversation to pause
REVIEW_REQUEST = ("Review the conversation above for what to keep in memory{skills}. Use the tools, "
                  "then answer with one line.")


class Learning:
    def __init__(self, stored: LearningStore, transcripts: SessionStore, memory: Memory, skills: SkillLibrary, tools: ToolRegistry, *,
                 review_agent: Agent | None, delivery: Delivery, trust: Trust, settings: "ReviewConfig") -> None:
        self.stored = stored  # review counters, the prompt snapshots
        self.transcripts = transcripts
        self.trust = trust
        self.memory = memory
        self.skills = skills
        self.tools = tools
        self.review_agent = review_agent
        self.delivery = delivery
        self.memory_every = settings.memory_every_turns
        self.skill_every = settings.skill_every_iterations
        self.notify = settings.notify
        self._slots = asyncio.Semaphore(settings.max_concurrent)
        self._reviews: set[asyncio.Task[None]] = set()
        self._queued: set[int] = set()  # sessions whose review waits for a pause or a slot
        self.after_pause = settings.after_pause_seconds
        self._last_turn: dict[int, float] = {}  # session with a waiting review → when its last turn finished
        self.reviews_done = 0

    @property
    def busy(self) -> bool:
        return any(not t.done() for t in self._reviews)

    # -- the frozen block -----------------------------------------------------------------

    async def session_block(self, session_id: int, *, platform: str, user_id: str, personal: bool) -> str:
        """The block of a session that has none kept yet (`SessionStore.open_turn` reads a kept one), rendered
        and kept; when another turn kept one first, that one."""
        block = await self.render_block(platform, user_id if personal else "")

        kept = await self.stored.keep_prompt(session_id, block)  # (the first snapshot kept wins)
        return kept if kept is not None else block

    async def render_block(self, platform: str, user_id: str) -> str:
        """The memory snapshot and the skill index, as they are now (read again for every new session: what
        another instance committed is in it)."""
        parts = (await self.memory.snapshot(platform, user_id), await self.skills.index())
        return "\n\n".join(p for p in parts if p)

    # -- counters and the fork ------------------------------------------------------------

    def turn_count(self, session_id: int, tool_iterations: int) -> TurnCount | None:
        """The counters' update for a finished turn, to run in the turn's own commit (`also` of
        `SessionStore.commit_turn`: no transaction or fsync of its own); None when nothing learns."""
        if self.review_agent is None:
            return None
        return self.stored.turn_count(session_id, tool_iterations, self.memory_every, self.skill_every)

    def review_if_due(self, count: TurnCount, chat: ChatRef, *, platform: str, user_id: str) -> None:
        """Start a review in the background when the committed count made one due (call after delivery)."""
        session_id = count.session_id
        if session_id in self._queued:  # not paused yet; the review waiting will read this turn too
            self._last_turn[session_id] = time.monotonic()
            return
        if not (count.memory_due or count.skill_due):
            return
        if len(self._reviews) >= MAX_WAITING_REVIEWS:
            log.warning("%d reviews are waiting; the review of session %s is skipped", len(self._reviews), session_id)
            return
        self._queued.add(session_id)
        self._last_turn[session_id] = time.monotonic()
        task = asyncio.create_task(self._review(session_id, chat, platform, user_id, count.skill_due),
                                   name=f"review:{session_id}")
        self._reviews.add(task)
        task.add_done_callback(self._reviews.discard)

    async def _review(self, session_id: int, chat: ChatRef, platform: str, user_id: str, skills: bool) -> None:
        assert self.review_agent is not None
        await self._pause(session_id)
        async with self._slots:
            self._queued.discard(session_id)  # from here on, a newer threshold may queue another
            self._last_turn.pop(session_id, None)
            usage_scope.serving("review", session_id, platform, user_id)
            try:
                history = await self.transcripts.history(session_id)  # the snapshot this review works on
                ctx = ToolContext(platform=platform, chat_id=chat.chat_id, user_id=user_id, session_id=session_id,
                                  provenance="review")
                # (its speakers are read after the snapshot: any who spoke since too, never fewer)
                ctx, acting = await self.trust.settle(ctx, self.transcripts, [(platform, user_id)], private=False)
                assert acting is not None
                known = await self.render_block(platform, "" if acting.several else acting.user_id)
                request = REVIEW_REQUEST.format(skills=" and which skills to write or improve" if skills else "")
                result = await self.review_agent.run_turn(history, request, self.tools.scope(toolsets=[TOOLSET]),
                                                          ctx, context=known)
                self.reviews_done += 1
                log.info("review of session %s: %s", session_id, result.text.strip()[:200])
                if self.notify and result.tool_calls:
                    await self.delivery.reply(chat, "💡 " + (result.text.strip().splitlines() or ["noted"])[0][:300])
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("review of session %s failed", session_id)

    async def _pause(self, session_id: int) -> None:
        """Until the session has had no finished turn for `after_pause` seconds (or MAX_PAUSE_WAIT)."""
        deadline = time.monotonic() + MAX_PAUSE_WAIT
        while (wait := min(self._last_turn.get(session_id, 0.0) + self.after_pause, deadline) - time.monotonic()) > 0:
            await asyncio.sleep(wait)

    async def stop(self, timeout: float) -> None:
        await finish_or_cancel(self._reviews, timeout)
