"""What building is given (`Ground`) and what it makes (`Parts`): frozen values."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Mapping

from gateway.access.policy import is_admin

if TYPE_CHECKING:
    from agent.safety.sandbox import Sandbox
    from agent.tools import ToolRegistry
    from gateway.access.pairing import Pairing
    from gateway.agents import Agents
    from gateway.approvals import Approvals
    from gateway.chat.delivery import Delivery
    from gateway.chat.inbound import Inbound
    from gateway.chat.sessions import Sessions
    from gateway.chat.turns import Turns
    from gateway.config import Config
    from gateway.cron.jobs import CronJobs
    from gateway.cron.timers import CronTimers
    from gateway.goals import Goals
    from gateway.learning.curator import Curator
    from gateway.learning.review import Learning
    from gateway.ops.gauges import Gauges
    from gateway.ops.metrics import Metrics
    from gateway.retention import Retention
    from gateway.storage import Store
    from gateway.tick import Tick
    from platforms.base import PlatformAdapter
    from platforms.loops import Background


@dataclass(frozen=True, slots=True)
class Ground:
    """What every builder is given: the configuration, the open store, the platforms, and the runner's own
    metrics, background tasks, state (starting | running | draining | stopped) and instance id (the one it is
    known by in the shared database: `gateway.cron.ledger.new_instance_id`)."""

    config: "Config"
    store: "Store"
    adapters: Mapping[str, "PlatformAdapter"]
    metrics: "Metrics"
    background: "Background"
    state: Callable[[], str]
    instance_id: str

    @property
    def local(self) -> frozenset[str]:
        """The platforms whose people are the machine's owner (the web chat): trusted surfaces."""
        return frozenset(name for name, adapter in self.adapters.items() if adapter.capabilities.local)

    def is_admin(self, platform: str, user: str) -> bool:
        return is_admin(self.config.access, platform, user)


@dataclass(frozen=True, slots=True)
class Parts:
    """The gateway's parts, built (`build`) and not yet started."""

    store: "Store"
    agents: "Agents"  # the LLM client and the agents over it
    sandbox: "Sandbox"
    tools: "ToolRegistry"
    pairing: "Pairing"
    delivery: "Delivery"  # the outbox: every message out
    approvals: "Approvals"
    jobs: "CronJobs"
    cron_timers: "CronTimers"
    learning: "Learning"  # reviews; the memory and skills
    goals: "Goals"
    turns: "Turns"
    sessions: "Sessions"  # one worker per conversation
    inbound: "Inbound"  # what every adapter calls
    tick: "Tick"
    curator: "Curator"
    retention: "Retention"
    gauges: "Gauges"  # /metrics
