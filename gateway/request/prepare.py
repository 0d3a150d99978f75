"""The whole body validated, estimated and described for the scheduler: what every front
submits, and the record that follows the request to its end."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gateway.context import GatewayContext, Runtime
from gateway.forward.upstream import upstream_body
from gateway.metrics.records import RequestRecord, canonical_prompt, run_digest
from gateway.request.auth import Tenant
from gateway.request.inbound import (
    ParsedBody,
    RunHeaders,
    decode_json_object,
    parse_body,
    parse_metadata,
)
from policies.prompt_blocks import prompt_blocks
from policies.types import FlowKey, RequestInfo, RunHints, deadline_bucket


@dataclass(frozen=True)
class Prepared:
    runtime: Runtime
    """The config this request was prepared under: read once, so a reload in the middle of
    one request never gives it a mixed view."""
    path: str
    parsed: ParsedBody
    request: RequestInfo
    raw: bytes
    """The body as the client sent it (``parsed.body`` is its decoding)."""
    prefer_async: bool = False
    """``Prefer: respond-async``: a refusal may become a 202 (``async_routes.refused``)."""

    def upstream_body(self, sent: RequestInfo) -> bytes:
        """The body the backend gets for ``sent`` (the admitted request: its model and, when
        degraded, its ``max_tokens``)."""
        parsed = self.parsed
        return upstream_body(
            parsed.body,
            model=sent.model,
            max_tokens=sent.max_tokens,
            stream=parsed.stream,
            raw=self.raw,
            key=parsed.max_tokens_field,
        )


def prepare(
    ctx: GatewayContext,
    runtime: Runtime,
    tenant: Tenant,
    hdrs: Mapping[str, str],
    path: str,
    request_id: str,
    arrival: float,
    raw: bytes,
    body: dict[str, Any] | None = None,
    *,
    prefer_async: bool = False,
) -> Prepared:
    """The whole body ``raw`` (``body``: its decoding, when the caller has it) validated,
    estimated and described for the scheduler. ``prefer_async``: the client asked for the
    asynchronous handoff (only the HTTP front offers it)."""
    if body is None:
        body = decode_json_object(raw)
    meta = parse_metadata(hdrs, tenant, request_id)
    server = runtime.loaded.config.server
    parsed = parse_body(
        path, body, ctx.pool.known_models(), ctx.pool.model_limit, server.max_sequences_per_request
    )
    flow = FlowKey(tenant.name, meta.workload_class, parsed.model, deadline_bucket(meta.deadline_s))
    estimate = ctx.estimator.estimate(
        parsed.model,
        parsed.prompt_chars,
        max_tokens=parsed.max_tokens,
        max_model_len=parsed.model_limit,
        flow=flow,
        fan_out=parsed.fan_out,
        known_prompt_tokens=parsed.prompt_token_ids,
    )
    canonical = canonical_prompt(parsed.prompt)
    blocks = None
    if ctx.admission.scheduler.policy.models_prefixes:
        blocks = prompt_blocks(canonical, parsed.model, estimate.prompt_tokens)
    info = RequestInfo(
        request_id=request_id,
        tenant=tenant.name,
        workload_class=meta.workload_class,
        model=parsed.model,
        estimate=estimate,
        arrival=arrival,
        deadline=None if meta.deadline_s is None else arrival + meta.deadline_s,
        priority=tenant.priority,
        weight=tenant.weight,
        max_tokens=parsed.max_tokens,
        is_retry=meta.is_retry,
        session_id=meta.session_id,
        prompt_hash=hashlib.sha256(canonical).hexdigest(),
        stream=parsed.stream,
        run=_run_hints(meta.run, arrival),
        blocks=blocks,
    )
    return Prepared(runtime, path, parsed, info, raw, prefer_async)


def _run_hints(run: RunHeaders | None, arrival: float) -> RunHints | None:
    if run is None:
        return None
    deadline = None if run.deadline_s is None else arrival + run.deadline_s
    return RunHints(run.run_id, deadline, run.calls, run.tokens, run.branches)


def request_record(prepared: Prepared, arrival: float) -> RequestRecord:
    req = prepared.request
    record = RequestRecord(
        req.request_id,
        req.tenant,
        req.workload_class,
        req.model,
        prepared.path,
        prepared.parsed.stream,
        req.prompt_hash,
        arrival,
        is_retry=req.is_retry,
    )
    if req.run is not None:
        record.extra["run_sha256"] = run_digest(req.tenant, req.run.run_id)
    return record
