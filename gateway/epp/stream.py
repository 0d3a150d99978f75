"""One ext_proc ``Process`` call: one HTTP request through Envoy, from its headers to the
end of its response, as a state machine over the messages Envoy sends.

Request side, by body mode (Envoy says it in ``protocol_config``; the ``epp:`` config
says it for an Envoy that does not):

* ``FULL_DUPLEX_STREAMED``: Envoy streams the body without waiting; the answer to the
  headers waits for the body's end (as the reference pickers do), then the body goes back
  as ``streamed_response`` pieces.
* ``BUFFERED``: the headers are answered at once; the whole body comes in one message,
  answered with the routing headers, the metadata and, when it changed, the new body.

The decision (``decision.decide``) may hold the stream while the request is queued;
Envoy ending the call (a reset cancels this handler; a completed call fires its done
callback) takes the request out of the queue at once. Whatever ends the call (the
response's end, Envoy's reset, a gRPC error, a bug), ``run``'s ``finally`` ends the flight,
once.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Mapping
from typing import Any

import grpc
from envoy.extensions.filters.http.ext_proc.v3 import processing_mode_pb2
from starlette.responses import JSONResponse, Response

from gateway.admission.flight import Flight
from gateway.config.schema import EppConfig
from gateway.context import GatewayContext, Runtime
from gateway.epp.decision import Inbound, Routed, decide
from gateway.epp.endpoints import Endpoints
from gateway.epp.headers import (
    filter_metadata,
    header_dict,
    response_code,
    served_endpoint,
    subset_hint,
)
from gateway.epp.mutations import (
    CONTINUE_REQUEST_BODY,
    CONTINUE_REQUEST_HEADERS,
    CONTINUE_REQUEST_TRAILERS,
    CONTINUE_RESPONSE_BODY,
    CONTINUE_RESPONSE_TRAILERS,
    body_response,
    destination_metadata,
    immediate,
    request_headers_response,
    response_headers_response,
    route_headers,
    routed_body_answer,
    streamed_bodies,
)
from gateway.epp.response import ResponseWatch
from gateway.request.body import read_body
from gateway.request.errors import ApiError, error_body, retry_after_headers
from gateway.request.inbound import CHAT, COMPLETIONS, request_id_from
from gateway.request.responses import headers as disclosure_headers
from gateway.request.responses import not_served, refuse
from policies.types import Outcome

log = logging.getLogger("sluicegate.epp")
MODELS = "/v1/models"
_MODE_NAME = processing_mode_pb2.ProcessingMode.BodySendMode.Name
_DECIDED_PATHS = (CHAT, COMPLETIONS)


class _Ended(Exception):
    """Envoy ended the call before the request body was whole."""


class ProcessStream:
    def __init__(self, ctx: GatewayContext, context: Any) -> None:
        self.ctx = ctx
        self.runtime: Runtime = ctx.runtime
        """The one read of the config for this call's request."""
        self.settings: EppConfig = self.runtime.loaded.config.epp
        self.context = context
        self.gone: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.request_mode = self.settings.request_body_mode
        self.response_mode: str = self.settings.response_body_mode
        self.watch: ResponseWatch | None = None
        self.request_trailers = False
        self.response_started = False
        """A response message came (its headers, or its first body piece)."""

    async def run(self) -> None:
        self.context.add_done_callback(self._call_done)
        try:
            await self._serve()
        except (asyncio.CancelledError, grpc.aio.AioRpcError):
            raise
        except Exception:
            log.exception("ext_proc stream failed")
            if self.watch is not None:
                self.watch.flight.finish(Outcome.FAILED, status=500, error="picker error")
            raise
        finally:
            self._end()

    def _call_done(self, _context: Any) -> None:
        """The call ended (Envoy reset it, or it completed): a queued request leaves."""
        if not self.gone.done():
            self.gone.set_result(None)

    def _end(self) -> None:
        watch = self.watch
        if watch is None:
            return
        if self.response_mode == "NONE" and watch.status is not None:
            watch.complete()  # no body is sent to the picker: the call's end is the response's
        else:
            watch.abandoned("the ext_proc stream ended before the response")

    async def _next(self) -> Any:
        """Envoy's next message; None when it ended the call (or the call failed)."""
        try:
            message = await self.context.read()
        except grpc.aio.AioRpcError:
            message = grpc.aio.EOF
        if message is grpc.aio.EOF:
            self._call_done(self.context)
            return None
        return message

    async def _send(self, message: Any) -> None:
        await self.context.write(message)

    async def _serve(self) -> None:
        first = await self._next()
        if first is None or first.WhichOneof("request") != "request_headers":
            return
        if first.HasField("protocol_config"):
            config = first.protocol_config
            self.request_mode = _MODE_NAME(config.request_body_mode)  # type: ignore[assignment]
            self.response_mode = _MODE_NAME(config.response_body_mode)
            if self.response_mode == "NONE":
                _warn_no_response_body()
        hdrs = header_dict(first.request_headers.headers)
        path = hdrs.get(":path", "").split("?", 1)[0]
        subset = subset_hint(filter_metadata(first))
        method = hdrs.get(":method")
        if method == "GET" and path == MODELS:
            await self._pass_through(subset)
            return
        if method != "POST" or path not in _DECIDED_PATHS:
            status = 405 if path in _DECIDED_PATHS else 404
            await self._send(immediate(not_served(status, request_id_from(hdrs))))
            return
        if first.request_headers.end_of_stream:  # no body: refused by the parser
            await self._decide(hdrs, path, subset, raw=b"")
            return
        if self.request_mode not in ("FULL_DUPLEX_STREAMED", "BUFFERED"):
            await self._send(immediate(_unsupported_mode(self.request_mode)))
            return
        if self.request_mode == "BUFFERED":
            await self._send(CONTINUE_REQUEST_HEADERS)
        await self._decide(hdrs, path, subset)

    async def _decide(
        self,
        hdrs: Mapping[str, str],
        path: str,
        subset: frozenset[str] | None,
        raw: bytes | Response | None = None,
    ) -> None:
        if raw is None:
            raw = await self._body(hdrs, path)
        if raw is None:
            return
        if isinstance(raw, Response):
            await self._send(immediate(raw))
            return
        decided = await decide(self.ctx, self.runtime, Inbound(hdrs, path, raw, subset), self.gone)
        if decided is None:
            return
        if isinstance(decided, Response):
            await self._send(immediate(decided))
            return
        parsed = decided.prepared.parsed
        self.watch = ResponseWatch(decided.flight, parsed.stream, parsed.client_wants_usage)
        await self._route(decided)
        await self._relay()

    async def _body(self, hdrs: Mapping[str, str], path: str) -> bytes | Response | None:
        """The whole request body (None: Envoy ended the stream first), or a refusal."""
        server = self.runtime.loaded.config.server
        try:
            return await read_body(self._next_piece, server.max_body_bytes, server.body_timeout_s)
        except _Ended:
            return None
        except ApiError as err:
            return self._refuse(err, hdrs, path)

    async def _next_piece(self) -> tuple[bytes, bool]:
        """The next piece of the request body (trailers end it); raises ``_Ended``."""
        while (message := await self._next()) is not None:
            kind = message.WhichOneof("request")
            if kind == "request_trailers":
                self.request_trailers = True
                return b"", False
            if kind == "request_body":
                return message.request_body.body, not message.request_body.end_of_stream
        raise _Ended

    def _refuse(self, err: ApiError, hdrs: Mapping[str, str], path: str) -> Response:
        return refuse(self.ctx, err, request_id_from(hdrs), path, self.ctx.clock())

    async def _route(self, routed: Routed) -> None:
        body, trace = routed.body, routed.flight.trace
        carrier = None if trace is None else trace.carrier()
        if self.request_mode == "FULL_DUPLEX_STREAMED":
            headers = route_headers(routed.endpoints, len(body), carrier)
            await self._send(request_headers_response(headers, routed.endpoints))
            for piece in streamed_bodies(body, not self.request_trailers, request=True):
                await self._send(piece)
        elif routed.changed or carrier:
            changed = body if routed.changed else None
            length = None if changed is None else len(changed)
            headers = route_headers(routed.endpoints, length, carrier)
            answer = body_response(changed, request=True, headers=headers)
            answer.dynamic_metadata.CopyFrom(destination_metadata(routed.endpoints))
            await self._send(answer)
        else:
            await self._send(routed_body_answer(routed.endpoints))
        if self.request_trailers:
            await self._send(CONTINUE_REQUEST_TRAILERS)

    async def _relay(self) -> None:
        """Everything after the routing answer, until Envoy ends the call."""
        while (message := await self._next()) is not None:
            kind = message.WhichOneof("request")
            if kind == "response_headers":
                await self._response_headers(message)
            elif kind == "response_body":
                await self._response_body(message)
            elif kind == "response_trailers":
                if self.watch is not None:
                    self.watch.complete()
                await self._send(CONTINUE_RESPONSE_TRAILERS)
            elif kind == "request_body":
                await self._echo(message.request_body, request=True)
            elif kind == "request_trailers":
                await self._send(CONTINUE_REQUEST_TRAILERS)

    async def _response_headers(self, message: Any) -> None:
        self.response_started = True
        watch = self.watch
        extra: dict[str, str] = {}
        if watch is not None:
            watch.headers(header_dict(message.response_headers.headers))
            self._note_served(watch.flight, served_endpoint(message))
            extra = disclosure_headers(watch.flight)
        if watch is not None and message.response_headers.end_of_stream:
            watch.complete()
        await self._send(response_headers_response(extra))

    def _note_served(self, flight: Flight, served: str | None) -> None:
        """Where the gateway really sent it (a fallback, or a retry elsewhere)."""
        log.debug("request %s served by %s", flight.record.request_id, served)
        if served is None:
            return
        backends = Endpoints.of(self.ctx.pool.configs()).by_endpoint
        name = backends.get(served)
        if name is not None and name != flight.record.backend:
            log.info(
                "request %s served by %s, picked %s",
                flight.record.request_id,
                name,
                flight.record.backend,
            )
            flight.record.backend = name

    async def _response_body(self, message: Any) -> None:
        body = message.response_body
        watch = self.watch
        end = bool(body.end_of_stream)
        data = body.body
        replacement = None
        if watch is not None:
            if not self.response_started:
                self._headless_response(watch, message)
            replacement = watch.body(data, end)
        if end and watch is not None:
            # Before the answer: once Envoy has it, it ends the response and may reset
            # this call at once (the flight would end as cancelled).
            watch.complete()
        await self._echo(body, request=False, replacement=replacement, data=data)

    def _headless_response(self, watch: ResponseWatch, message: Any) -> None:
        """The response's first message is a body piece (Envoy skips the response headers):
        its status and upstream come as Envoy's attributes on that piece."""
        self.response_started = True
        status = response_code(message)
        if status is not None:
            watch.learn_status(status)
        self._note_served(watch.flight, served_endpoint(message))

    async def _echo(
        self,
        body: Any,
        *,
        request: bool,
        replacement: bytes | None = None,
        data: bytes | None = None,
    ) -> None:
        mode = self.request_mode if request else self.response_mode
        if mode == "FULL_DUPLEX_STREAMED":
            if replacement is not None:
                data = replacement
            elif data is None:
                data = body.body
            for piece in streamed_bodies(data, bool(body.end_of_stream), request=request):
                await self._send(piece)
        elif replacement is not None:
            await self._send(body_response(replacement, request=request))
        else:
            await self._send(CONTINUE_REQUEST_BODY if request else CONTINUE_RESPONSE_BODY)

    async def _pass_through(self, subset: frozenset[str] | None) -> None:
        """``GET /v1/models``, not decided on: routed to an available endpoint (the
        backend's own list), its bytes passed on untouched."""
        endpoint = self._any_endpoint(subset)
        if endpoint is None:
            await self._send(immediate(_no_endpoint()))
            return
        await self._send(request_headers_response(route_headers(endpoint, None), endpoint))
        await self._relay()

    def _any_endpoint(self, subset: frozenset[str] | None) -> str | None:
        endpoints = Endpoints.of(self.ctx.pool.configs())
        views = [
            v
            for v in self.ctx.pool.snapshot().backends
            if v.available
            and v.name in endpoints.by_name
            and (subset is None or endpoints.by_name[v.name] in subset)
        ]
        if not views:
            return None
        return endpoints.by_name[min(views, key=lambda v: v.running or 0.0).name]


@functools.cache
def _warn_no_response_body() -> None:
    log.warning(
        "Envoy's response_body_mode is NONE: Envoy ends the ext_proc call at the response "
        "headers, so tickets are released then and usage is never learned (docs/epp.md)"
    )


def _no_endpoint() -> Response:
    body = error_body("no endpoint is available", "overloaded", None, "no_healthy_backend")
    headers = {
        **retry_after_headers(None),
        "x-sluicegate-decision": "reject",
        "x-sluicegate-reason": "no_healthy_backend",
    }
    return JSONResponse(body, status_code=503, headers=headers)


def _unsupported_mode(mode: str) -> Response:
    message = f"the picker needs request_body_mode FULL_DUPLEX_STREAMED or BUFFERED, not {mode}"
    return JSONResponse(error_body(message, "server_error"), status_code=500)
