"""What trace context reached a backend: the ``traceparent`` header of every completion an
emulator was sent, recorded before its own handler runs (the handler is unchanged)."""

from __future__ import annotations

from typing import Any

from starlette.routing import Route

from emulator.embedded import EmbeddedEmulator

COMPLETION_PATHS = ("/v1/chat/completions", "/v1/completions")
Scope = dict[str, Any]


class _Tap:
    """An ASGI endpoint that notes the header, then hands the call to the real route."""

    def __init__(self, inner: Route, seen: list[str | None]) -> None:
        self.inner = inner
        self.seen = seen

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        headers = dict(scope["headers"])
        value = headers.get(b"traceparent")
        self.seen.append(None if value is None else value.decode("latin-1"))
        await self.inner.handle(scope, receive, send)


def tap_traceparents(emulator: EmbeddedEmulator) -> list[str | None]:
    """The list each completion's ``traceparent`` (None: none came) is appended to."""
    seen: list[str | None] = []
    router = emulator.server.config.app.router
    for route in list(router.routes):
        if isinstance(route, Route) and route.path in COMPLETION_PATHS:
            router.routes.insert(0, Route(route.path, _Tap(route, seen), methods=["POST"]))
    return seen
