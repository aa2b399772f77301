"""What the gateway does itself, beside agent turns and chat commands: pairing offers, a chat reopened."""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Mapping

from gateway.chat.turns import NO_LLM
from platforms.base import ChatOpened, ChatRef, InboundMessage

if TYPE_CHECKING:
    from agent.llm import LLMClient
    from gateway.access.pairing import Pairing
    from gateway.chat.delivery import Delivery
    from platforms.base import PlatformAdapter

log = logging.getLogger(__name__)

LLM_PROBE_TTL = 60.0


class Control:
    def __init__(self, *, delivery: "Delivery", pairing: "Pairing", llm: "LLMClient | None",
                 adapters: Mapping[str, "PlatformAdapter"]) -> None:
        self.delivery, self.pairing, self.llm, self.adapters = delivery, pairing, llm, adapters
        self._llm_problem: tuple[float, str | None] | None = None

    async def offer_pairing(self, msg: InboundMessage) -> None:
        """An unknown person wrote in a DM: send a pairing code (rate-limited) and nothing else."""
        code = await self.pairing.request(msg.platform, msg.user_id, msg.user_name, msg.chat_id)
        if code is None:
            return
        log.info("pairing code issued for %s user %s (%s)", msg.platform, msg.user_id, msg.user_name)
        await self.delivery.reply(msg.reply_chat, (
            f"Hi {msg.user_name or 'there'}! I only talk to people my owner has approved. "
            f"Your pairing code is {code} — ask the owner to run:\n"
            f"chatgate pair approve {msg.platform} {code}\nThe code expires in one hour."))

    async def chat_opened(self, event: ChatOpened) -> None:
        """A chat is reachable again: deliver what waits for it, and warn if the LLM is missing."""
        await self.delivery.flush_chat(event.platform, event.chat_id)
        problem = await self._llm_status()
        adapter = self.adapters.get(event.platform)
        if problem and adapter is not None:
            try:
                await adapter.notice(ChatRef(event.platform, event.chat_id), problem)
            except Exception as exc:
                log.debug("could not show LLM notice: %s", exc)

    async def _llm_status(self) -> str | None:
        llm = self.llm
        if llm is None:
            return NO_LLM
        now = time.monotonic()
        if self._llm_problem is None or now - self._llm_problem[0] > LLM_PROBE_TTL:
            reason = await llm.probe()
            self._llm_problem = (now, f"The language model is not reachable: {reason}" if reason else None)
        return self._llm_problem[1]
