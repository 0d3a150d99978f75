"""The emulator's HTTP face: vLLM 0.32's OpenAI-compatible server for one model on one card.

Endpoints: ``/v1/chat/completions`` and ``/v1/completions`` (streaming and not, ``usage``,
``stream_options.include_usage``), ``/v1/models`` (with ``max_model_len``), ``/health``,
``/ping``, ``/version``, ``/metrics``. Errors use vLLM's body ``{"error": {"message", "type",
"param", "code"}}``: 400 ``BadRequestError``, 404 ``NotFoundError`` for another model, 503
``Service Unavailable`` when ``--max-num-queued-reqs`` is reached. A client that goes away
(stream or not) aborts its request: slot and KV blocks are freed at once.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from emulator import text
from emulator.engine import EngineBusy, FinishedRequest
from emulator.metrics import CONTENT_TYPE
from emulator.prefix_hash import block_hashes
from emulator.runner import EngineRunner, TokenBatch

VLLM_VERSION = "0.32.0"
BUSY_MESSAGE = (
    "The engine is currently busy and cannot accept new requests. "
    "Please try again later or on a different instance."
)


def error_response(status: int, err_type: str, message: str, param: str | None = None) -> Response:
    body = {"error": {"message": message, "type": err_type, "param": param, "code": status}}
    return JSONResponse(body, status_code=status)


class _EngineStream(StreamingResponse):
    """A stream that aborts its engine request however the response ends (even unstarted)."""

    def __init__(self, content: AsyncIterator[str], on_close: Callable[[], None]) -> None:
        super().__init__(content, media_type="text/event-stream")
        self._on_close = on_close

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._on_close()


def _sse(payload: Mapping[str, Any]) -> str:
    return f"data: {json.dumps(payload, separators=(',', ':'))}\n\n"


def _usage(prompt_tokens: int, completion_tokens: int, cached_tokens: int | None) -> dict[str, Any]:
    """vLLM's usage; ``cached_tokens`` None unless started with --enable-prompt-tokens-details."""
    details = None
    if cached_tokens is not None:
        details = {
            "cached_tokens": cached_tokens,
            "created_cache_tokens": None,
            "multimodal_tokens": None,
        }
    return {
        "prompt_tokens": prompt_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "completion_tokens": completion_tokens,
        "prompt_tokens_details": details,
    }


class _Completion:
    """Shapes one request's output as chat or text completion chunks/bodies."""

    def __init__(
        self, chat: bool, req_id: str, model: str, plan: text.Plan, *, details: bool = False
    ) -> None:
        self.chat, self.req_id, self.model, self.plan = chat, req_id, model, plan
        self.details = details
        self.created = int(time.time())
        self.object = "chat.completion" if chat else "text_completion"

    def _envelope(self, obj: str, choices: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "id": self.req_id,
            "object": obj,
            "created": self.created,
            "model": self.model,
            "choices": choices,
        }

    def chunk(self, piece: str | None, finish: str | None) -> dict[str, Any]:
        obj = "chat.completion.chunk" if self.chat else "text_completion"
        if self.chat:
            delta = {"role": "assistant", "content": ""} if piece is None else {"content": piece}
            choice: dict[str, Any] = {"index": 0, "delta": delta, "logprobs": None}
        else:
            choice = {"index": 0, "text": piece or "", "logprobs": None}
        choice.update(finish_reason=finish, stop_reason=None)
        return self._envelope(obj, [choice])

    def usage_chunk(self, completion_tokens: int, cached_tokens: int) -> dict[str, Any]:
        obj = "chat.completion.chunk" if self.chat else "text_completion"
        body = self._envelope(obj, [])
        cached = cached_tokens if self.details else None
        body["usage"] = _usage(self.plan.prompt_tokens, completion_tokens, cached)
        return body

    def body(self, finished: FinishedRequest) -> dict[str, Any]:
        content = text.reply_text(finished.output_tokens)
        choice: dict[str, Any] = {"index": 0, "logprobs": None}
        if self.chat:
            choice["message"] = {"role": "assistant", "content": content, "tool_calls": []}
        else:
            choice["text"] = content
        choice.update(finish_reason=finished.finish_reason, stop_reason=None)
        out = self._envelope(self.object, [choice])
        cached = finished.cached_tokens if self.details else None
        out["usage"] = _usage(finished.prompt_tokens, finished.output_tokens, cached)
        return out


async def _stream(
    runner: EngineRunner, shape: _Completion, include_usage: bool
) -> AsyncGenerator[str, None]:
    emitted = cached = 0
    role_sent = not shape.chat
    async for event in runner.events(shape.req_id):
        if not isinstance(event, TokenBatch):
            cached = event.cached_tokens
            break
        if not role_sent:  # like vLLM: the role chunk comes with the first output, not before
            yield _sse(shape.chunk(None, None))
            role_sent = True
        for _ in range(event.count):
            last = emitted + 1 == shape.plan.output_tokens
            finish = shape.plan.finish_reason if last else None
            yield _sse(shape.chunk(text.token_text(emitted), finish))
            emitted += 1
    if not role_sent:  # no output at all: the stream still opens with the role chunk
        yield _sse(shape.chunk(None, None))
    if include_usage:
        yield _sse(shape.usage_chunk(emitted, cached))
    yield "data: [DONE]\n\n"


async def _wait_disconnect(request: Request) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def _collect(runner: EngineRunner, req_id: str) -> FinishedRequest | None:
    async for event in runner.events(req_id):
        if isinstance(event, FinishedRequest):
            return event
    return None


async def _complete(request: Request, runner: EngineRunner, shape: _Completion) -> Response:
    work = asyncio.create_task(_collect(runner, shape.req_id))
    gone = asyncio.create_task(_wait_disconnect(request))
    try:
        await asyncio.wait({work, gone}, return_when=asyncio.FIRST_COMPLETED)
        finished = work.result() if work.done() else None
    finally:
        work.cancel()
        gone.cancel()
        runner.abort(shape.req_id)
    if finished is None:  # the client is gone; nobody reads this
        return Response(status_code=499)
    return JSONResponse(shape.body(finished))


def create_app(
    runner: EngineRunner,
    model_name: str,
    *,
    seed: int = 0,
    enable_prompt_tokens_details: bool = False,
) -> FastAPI:
    """The emulator app. The runner's step loop starts and stops with the app's lifespan.

    ``enable_prompt_tokens_details``: vLLM's flag; usage then carries
    ``prompt_tokens_details.cached_tokens`` (prompt tokens the prefix cache served).
    """
    rng = random.Random(seed)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        await runner.start()
        try:
            yield
        finally:
            await runner.stop()

    app = FastAPI(title="sluicegate vLLM emulator", lifespan=lifespan)

    async def generate(request: Request, chat: bool) -> Response:
        try:
            body = await request.json()
            if not isinstance(body, dict):
                raise text.InvalidRequest("request body must be a JSON object")
            model = body.get("model", model_name)
            if model != model_name:
                return error_response(404, "NotFoundError", f"The model `{model}` does not exist.")
            token_ids = text.prompt_token_ids(body, chat, runner.profile)
            plan = text.plan_request(body, len(token_ids), runner.profile, rng)
        except text.InvalidRequest as bad:
            return error_response(400, "BadRequestError", bad.message, bad.param)
        except ValueError as bad:  # JSON decode errors
            return error_response(400, "BadRequestError", f"invalid JSON body: {bad}")
        prefix = "chatcmpl" if chat else "cmpl"
        req_id = f"{prefix}-{uuid.uuid4().hex}"
        shape = _Completion(chat, req_id, model_name, plan, details=enable_prompt_tokens_details)
        try:
            runner.submit(
                shape.req_id,
                plan.prompt_tokens,
                plan.output_tokens,
                plan.max_tokens,
                plan.finish_reason,
                block_hashes=block_hashes(token_ids, runner.profile.engine.block_size),
            )
        except EngineBusy:
            return error_response(503, "Service Unavailable", BUSY_MESSAGE)
        if body.get("stream"):
            options = body.get("stream_options") or {}
            include_usage = bool(isinstance(options, dict) and options.get("include_usage"))
            stream = _stream(runner, shape, include_usage)
            return _EngineStream(stream, lambda: runner.abort(shape.req_id))
        return await _complete(request, runner, shape)

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Response:
        return await generate(request, chat=True)

    @app.post("/v1/completions")
    async def completions(request: Request) -> Response:
        return await generate(request, chat=False)

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        card = {
            "id": model_name,
            "object": "model",
            "created": int(time.time()),
            "owned_by": "vllm",
            "root": model_name,
            "parent": None,
            "max_model_len": runner.profile.engine.max_model_len,
        }
        return {"object": "list", "data": [card]}

    @app.get("/health")
    @app.get("/ping")
    async def health() -> Response:
        return Response(status_code=200)

    @app.get("/version")
    async def version() -> dict[str, str]:
        return {"version": VLLM_VERSION}

    @app.get("/metrics")
    async def metrics(request: Request) -> Response:
        peer = request.client
        client = f"{peer.host}:{peer.port}" if peer is not None else ""
        return Response(runner.render_metrics(client), media_type=CONTENT_TYPE)

    return app
