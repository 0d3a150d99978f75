"""Reading a trace's spans back from Phoenix's REST API
(``GET /v1/projects/{project}/spans?trace_id=...``).

Exporters batch (the SDK's ``BatchSpanProcessor``) and Phoenix inserts in batches too, so a
span shows up some time after it ended. ``wait_for_spans`` polls until every span a test
names has arrived, within a bounded deadline: the deadline only bounds a failure, and the
failure names what did arrive.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import httpx

PROJECT = "default"
"""Phoenix files spans without an ``openinference.project.name`` resource attribute here."""
ARRIVAL_TIMEOUT_S = 60.0
POLL_INTERVAL_S = 0.2


@dataclass(frozen=True)
class Span:
    name: str
    trace_id: str
    span_id: str
    parent_id: str | None
    kind: str
    status_code: str
    attributes: Mapping[str, Any]
    start_time: str

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Span:
        return cls(
            name=data["name"],
            trace_id=data["context"]["trace_id"],
            span_id=data["context"]["span_id"],
            parent_id=data.get("parent_id"),
            kind=data.get("span_kind", ""),
            status_code=data.get("status_code", ""),
            attributes=flat(data.get("attributes") or {}),
            start_time=data.get("start_time", ""),
        )


def flat(attributes: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Dotted names as the exporter sent them (``gen_ai.request.model``), whether Phoenix
    answers them flat or nested by their dots."""
    out: dict[str, Any] = {}
    for key, value in attributes.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(flat(value, f"{name}."))
        else:
            out[name] = value
    return out


@dataclass(frozen=True)
class Trace:
    spans: tuple[Span, ...]

    def named(self, name: str) -> list[Span]:
        return [span for span in self.spans if span.name == name]

    def one(self, name: str) -> Span:
        found = self.named(name)
        assert len(found) == 1, f"{len(found)} spans named {name!r} in\n{self.tree()}"
        return found[0]

    def children(self, parent: Span) -> list[Span]:
        return sorted(
            (span for span in self.spans if span.parent_id == parent.span_id),
            key=lambda span: span.start_time,
        )

    def roots(self) -> list[Span]:
        ids = {span.span_id for span in self.spans}
        return sorted(
            (span for span in self.spans if span.parent_id not in ids),
            key=lambda span: span.start_time,
        )

    def tree(self) -> str:
        """The span tree as indented text (names, kinds, status), for failure messages."""
        lines: list[str] = []

        def walk(span: Span, depth: int) -> None:
            lines.append(f"{'  ' * depth}{span.name} [{span.kind} {span.status_code}]")
            for child in self.children(span):
                walk(child, depth + 1)

        for root in self.roots():
            walk(root, 0)
        return "\n".join(lines)


class PhoenixSpans:
    """The spans of one Phoenix project, read over its REST API."""

    def __init__(self, base_url: str, project: str = PROJECT) -> None:
        self.base_url = base_url
        self.project = project

    def trace(self, trace_id: str) -> Trace:
        """What Phoenix holds of ``trace_id`` now (32 lowercase hex digits)."""
        response = httpx.get(
            f"{self.base_url}/v1/projects/{self.project}/spans",
            params={"trace_id": trace_id, "limit": 1000},
            timeout=10.0,
        )
        if response.status_code == 404:  # the project appears with its first span
            return Trace(())
        response.raise_for_status()
        return Trace(tuple(Span.from_json(item) for item in response.json()["data"]))

    def wait_for_spans(
        self, trace_id: str, names: Iterable[str], *, timeout_s: float = ARRIVAL_TIMEOUT_S
    ) -> Trace:
        """The trace once a span of each of ``names`` has arrived; AssertionError with the
        tree that did arrive when the deadline passes first."""
        wanted = set(names)
        deadline = time.monotonic() + timeout_s
        while True:
            trace = self.trace(trace_id)
            if wanted <= {span.name for span in trace.spans}:
                return trace
            if time.monotonic() > deadline:
                missing = sorted(wanted - {span.name for span in trace.spans})
                raise AssertionError(
                    f"spans {missing} of trace {trace_id} not in Phoenix within {timeout_s} s;"
                    f" arrived:\n{trace.tree() or '(none)'}"
                )
            time.sleep(POLL_INTERVAL_S)
