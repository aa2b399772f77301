"""discord.py's client as chatgate uses it: its buttons, its slash commands, and where it connects.

* **Buttons** are a `discord.ui.View` of `discord.ui.Button`s whose `custom_id` is the gateway's data.
  The view only lays them out: a press comes through the client's `on_interaction` (nothing is kept per
  message), because discord.py's own dispatch (a stored view, or a `DynamicItem`) drops a press of a
  button that is no longer on the message (`ui/view.py`, `schedule_dynamic_item_call`: "if the item is
  not found then return") — the press of a person whose Discord has not yet shown that an approval was
  decided or expired, who would see "This interaction failed" instead of "Already decided."
* **Slash commands** live in the client's `app_commands.CommandTree`, one `Command` per chat command.
* **Where it connects.** discord.py takes its REST base from the class attribute `Route.BASE` and its
  first gateway address from `DiscordWebSocket.DEFAULT_GATEWAY`, and offers no per-client setting for
  either (README, Discord). `Endpoints` sets them only when `api_base`/`gateway_url` differ from
  discord.py's defaults, while the adapter runs, and puts back what was there when it stops.
"""

from __future__ import annotations

from typing import Any, Awaitable, Callable

import discord
import yarl
from discord import app_commands


class ChatgateClient(discord.Client):
    """A `discord.Client` with its slash commands' tree."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.tree = app_commands.CommandTree(self)


def buttons_view(rows: tuple[tuple[Any, ...], ...]) -> discord.ui.View | None:
    """The buttons of a reply (rows of `platforms.base.Button`) as a view; the first of a row is primary."""
    if not rows:
        return None
    view = discord.ui.View(timeout=None)
    for number, row in enumerate(rows):
        for place, button in enumerate(row):
            style = discord.ButtonStyle.primary if place == 0 else discord.ButtonStyle.secondary
            view.add_item(discord.ui.Button(label=button.text[:80], custom_id=button.data[:100], style=style,
                                            row=number))
    view.stop()  # (a finished view is sent, not stored: presses reach `on_interaction`, see above)
    return view


def slash_command(name: str, description: str,
                  run: Callable[[discord.Interaction, str], Awaitable[None]]) -> app_commands.Command[Any, Any, None]:
    """`/name`, with a free-text option `text` when the description shows the command taking words."""

    async def bare(interaction: discord.Interaction) -> None:
        await run(interaction, f"/{name}")

    @app_commands.describe(text="what follows the command")
    async def with_text(interaction: discord.Interaction, text: str | None = None) -> None:
        await run(interaction, f"/{name} {text or ''}".strip())

    return app_commands.Command(name=name, description=description[:100],
                                callback=with_text if f"/{name} " in description else bare)


def command_shape(commands: list[dict[str, Any]]) -> list[tuple[str, str, int]]:
    """What of a command list decides whether it must be registered again."""
    return sorted((str(c.get("name")), str(c.get("description")), len(c.get("options") or [])) for c in commands)


class Endpoints:
    """discord.py's two process-wide addresses, pointed at `api_base`/`gateway_url` while in use."""

    def __init__(self, api_base: str, gateway_url: str | None) -> None:
        self.api_base, self.gateway_url = api_base, gateway_url
        self._before: dict[str, Any] = {}  # what was changed → its value before

    def use(self) -> None:
        if self._before:
            return
        if self.api_base != discord.http.Route.BASE:
            self._before["BASE"] = discord.http.Route.BASE
            discord.http.Route.BASE = self.api_base
        if self.gateway_url and yarl.URL(self.gateway_url) != discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY:
            self._before["DEFAULT_GATEWAY"] = discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY
            discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(self.gateway_url)

    def release(self) -> None:
        if "BASE" in self._before:
            discord.http.Route.BASE = self._before["BASE"]
        if "DEFAULT_GATEWAY" in self._before:
            discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY = self._before["DEFAULT_GATEWAY"]
        self._before.clear()
