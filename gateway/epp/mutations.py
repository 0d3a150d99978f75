"""Building ext_proc ``ProcessingResponse`` messages: routing, bodies, immediate answers.

Bodies sent as ``streamed_response`` (``FULL_DUPLEX_STREAMED``) are cut into pieces of at
most ``BODY_CHUNK_LIMIT`` bytes, as llm-d's picker does (``pkg/common/envoy/chunking.go``:
some gateways cap one streamed piece at 64 KiB).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from envoy.config.core.v3 import base_pb2
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb
from envoy.type.v3 import http_status_pb2
from google.protobuf import struct_pb2
from starlette.responses import Response

from gateway.epp.headers import DESTINATION, DESTINATION_NAMESPACE

BODY_CHUNK_LIMIT = 62_000
_OVERWRITE = base_pb2.HeaderValueOption.OVERWRITE_IF_EXISTS_OR_ADD
_NOT_FORWARDED = frozenset({"content-length", "transfer-encoding", "connection"})


def header_mutation(headers: Mapping[str, str]) -> Any:
    """Set (overwrite) each header: a client's own ``x-gateway-destination-endpoint`` or
    ``x-sluicegate-*`` never survives next to the picker's."""
    return pb.HeaderMutation(
        set_headers=[
            base_pb2.HeaderValueOption(
                header=base_pb2.HeaderValue(key=k, raw_value=v.encode("latin-1")),
                append_action=_OVERWRITE,
            )
            for k, v in headers.items()
        ]
    )


def destination_metadata(endpoints: str) -> Any:
    """``dynamic_metadata["envoy.lb"]["x-gateway-destination-endpoint"]``."""
    inner = struct_pb2.Struct()
    inner.fields[DESTINATION].string_value = endpoints
    outer = struct_pb2.Struct()
    outer.fields[DESTINATION_NAMESPACE].struct_value.CopyFrom(inner)
    return outer


def route_headers(
    endpoints: str, body_length: int | None, trace: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The request headers the picker sets: the destination, the body's new length when
    the body was rewritten, and ``trace`` (the attempt's ``traceparent``, when tracing is
    on: the backend's spans join the trace under it)."""
    out = {DESTINATION: endpoints}
    if body_length is not None:
        out["content-length"] = str(body_length)
    if trace:
        out.update(trace)
    return out


def request_headers_response(headers: Mapping[str, str] | None, endpoints: str | None) -> Any:
    """The answer to ``request_headers``: continue, or continue routed to ``endpoints``."""
    common = pb.CommonResponse()
    if headers:
        common.header_mutation.CopyFrom(header_mutation(headers))
        common.clear_route_cache = True
    response = pb.ProcessingResponse(request_headers=pb.HeadersResponse(response=common))
    if endpoints is not None:
        response.dynamic_metadata.CopyFrom(destination_metadata(endpoints))
    return response


def response_headers_response(headers: Mapping[str, str]) -> Any:
    common = pb.CommonResponse()
    if headers:
        common.header_mutation.CopyFrom(header_mutation(headers))
    return pb.ProcessingResponse(response_headers=pb.HeadersResponse(response=common))


def streamed_bodies(body: bytes, end_of_stream: bool, *, request: bool) -> list[Any]:
    """``body`` as ``streamed_response`` pieces for the request or the response side; the
    last carries ``end_of_stream``. An empty body is one empty piece."""
    pieces = [body[i : i + BODY_CHUNK_LIMIT] for i in range(0, len(body), BODY_CHUNK_LIMIT)]
    pieces = pieces or [b""]
    out = []
    for i, piece in enumerate(pieces):
        streamed = pb.StreamedBodyResponse(
            body=piece, end_of_stream=end_of_stream and i == len(pieces) - 1
        )
        common = pb.CommonResponse(body_mutation=pb.BodyMutation(streamed_response=streamed))
        out.append(_body_response(common, request=request))
    return out


def body_response(
    replacement: bytes | None, *, request: bool, headers: Mapping[str, str] | None = None
) -> Any:
    """The answer to one body message in ``STREAMED`` or ``BUFFERED`` mode: continue
    unchanged (``replacement`` None) or with the body replaced; ``headers`` set too (the
    request headers are still held in ``BUFFERED`` mode)."""
    common = pb.CommonResponse()
    if replacement is not None:
        common.body_mutation.body = replacement
    if headers:
        common.header_mutation.CopyFrom(header_mutation(headers))
        common.clear_route_cache = True
    return _body_response(common, request=request)


@functools.lru_cache(maxsize=1024)
def routed_body_answer(endpoints: str) -> Any:
    """The answer to a ``BUFFERED`` request body that goes on unchanged, routed to
    ``endpoints``: the same for every such request to them, so built once per endpoint list
    (never mutated: grpc serializes it per write)."""
    answer = body_response(None, request=True, headers=route_headers(endpoints, None))
    answer.dynamic_metadata.CopyFrom(destination_metadata(endpoints))
    return answer


def _body_response(common: Any, *, request: bool) -> Any:
    if request:
        return pb.ProcessingResponse(request_body=pb.BodyResponse(response=common))
    return pb.ProcessingResponse(response_body=pb.BodyResponse(response=common))


def trailers_response(*, request: bool) -> Any:
    if request:
        return pb.ProcessingResponse(request_trailers=pb.TrailersResponse())
    return pb.ProcessingResponse(response_trailers=pb.TrailersResponse())


CONTINUE_REQUEST_HEADERS = request_headers_response(None, None)
CONTINUE_REQUEST_BODY = body_response(None, request=True)
CONTINUE_RESPONSE_BODY = body_response(None, request=False)
CONTINUE_REQUEST_TRAILERS = trailers_response(request=True)
CONTINUE_RESPONSE_TRAILERS = trailers_response(request=False)
"""The constant answers, built once (never mutated: grpc serializes them per write)."""


def immediate(response: Response) -> Any:
    """The HTTP front's answer (status, headers, body) as an ``ImmediateResponse``: a
    refusal through Envoy is the one the gateway's own port gives, byte for byte."""
    headers = {
        k.decode("latin-1"): v.decode("latin-1")
        for k, v in response.raw_headers
        if k.decode("latin-1").lower() not in _NOT_FORWARDED
    }
    answer = pb.ImmediateResponse(
        status=http_status_pb2.HttpStatus(code=response.status_code),  # type: ignore[arg-type]
        headers=header_mutation(headers),
        body=bytes(response.body),
    )
    return pb.ProcessingResponse(immediate_response=answer)
