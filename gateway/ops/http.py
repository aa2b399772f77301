"""The gateway's one HTTP server: health, readiness, metrics, and whatever adapters serve."""

from __future__ import annotations

from typing import Any, Awaitable, Callable, Sequence

from aiohttp import web


class HttpServer:
    def __init__(self, host: str, port: int, *, routes: Sequence[Any],
                 readiness: Callable[[], dict[str, dict[str, Any]]],
                 metrics: Callable[[], Awaitable[bytes]],
                 storage: Callable[[], Awaitable[dict[str, Any]]] | None = None) -> None:
        self.host, self._port = host, port
        self._readiness = readiness
        self._storage = storage  # whether the database takes writes (`Store.check`: a real write when idle)
        self._metrics = metrics
        self.app = web.Application(client_max_size=2 * 1024 * 1024)
        self.app.add_routes([web.get("/healthz", self._healthz), web.get("/readyz", self._readyz),
                             web.get("/metrics", self._metrics_page), *routes])
        self._runner: web.AppRunner | None = None
        self._site: web.TCPSite | None = None

    @property
    def port(self) -> int:
        """The bound port (useful when configured as 0)."""
        if self._site is not None and self._site._server is not None:  # noqa: SLF001 - aiohttp has no public getter
            return self._site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return self._port

    async def start(self) -> None:
        if self._runner is not None:
            return
        self._runner = web.AppRunner(self.app, access_log=None, shutdown_timeout=2.0)
        await self._runner.setup()
        self._site = web.TCPSite(self._runner, self.host, self._port)
        await self._site.start()

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = self._site = None

    async def _healthz(self, _: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def _readyz(self, _: web.Request) -> web.Response:
        """Ready when some platform serves and the database takes writes (503 otherwise: nothing can
        serve); a platform on standby (another instance holds its connection) serves its part here, which is to
        wait; `degraded` while another platform is not ready (each one's state and error are listed).
        A database that wrote nothing lately is checked with a real write first (a disk that filled up
        while idle)."""
        states = self._readiness()
        serving = sum(s["state"] in ("ready", "standby") for s in states.values())  # (standby: another instance serves)
        ready = serving > 0
        body: dict[str, Any] = {"ready": ready, "degraded": 0 < serving < len(states), "platforms": states}
        if self._storage is not None:
            body["storage"] = await self._storage()
            body["ready"] = ready = ready and body["storage"]["state"] == "ready"
        return web.json_response(body, status=200 if ready else 503)

    async def _metrics_page(self, _: web.Request) -> web.Response:
        return web.Response(body=await self._metrics(), content_type="text/plain", charset="utf-8")
