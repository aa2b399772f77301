"""systemd's readiness protocol and watchdog, spoken directly (a datagram to `$NOTIFY_SOCKET`).

`Type=notify` units learn "ready" from `READY=1`, sent once the gateway is running, and
"stopping" from `STOPPING=1`. With `WatchdogSec=` systemd expects `WATCHDOG=1` at least every
`$WATCHDOG_USEC`; the gateway sends it from a task on its own event loop, so a loop that is
wedged (a blocking call, a spin) stops the pings and systemd restarts the service. Outside
systemd (no `$NOTIFY_SOCKET`) every call does nothing.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket

log = logging.getLogger(__name__)


def notify(state: str) -> bool:
    """Send one notification (e.g. "READY=1"); False when not under systemd or it failed."""
    address = os.environ.get("NOTIFY_SOCKET")
    if not address:
        return False
    if address.startswith("@"):  # an abstract socket
        address = "\0" + address[1:]
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
            sock.connect(address)
            sock.sendall(state.encode())
        return True
    except OSError as exc:
        log.warning("could not notify systemd (%s): %s", state.split("=", 1)[0], exc)
        return False


def watchdog_interval() -> float | None:
    """Seconds between two watchdog pings (half of what systemd allows), or None without a watchdog."""
    usec = os.environ.get("WATCHDOG_USEC")
    pid = os.environ.get("WATCHDOG_PID")
    if not usec or (pid and pid != str(os.getpid())):
        return None
    try:
        return max(int(usec) / 2e6, 0.1)
    except ValueError:
        return None


async def feed_watchdog(interval: float) -> None:
    """Ping the watchdog for as long as the event loop runs this task."""
    while True:
        notify("WATCHDOG=1")
        await asyncio.sleep(interval)
