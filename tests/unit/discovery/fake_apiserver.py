"""A fake Kubernetes API server at the HTTP layer: raw asyncio HTTP/1.1 on loopback, serving
one namespace's ``InferencePool`` objects and pods the way a real API server does.

- ``GET /apis/inference.networking.k8s.io/v1/namespaces/NS/inferencepools/NAME``: the object.
- ``GET .../inferencepools?fieldSelector=metadata.name%3DNAME&watch=true``: its events.
- ``GET /api/v1/namespaces/NS/pods?labelSelector=k%3Dv``: a ``PodList`` whose
  ``metadata.resourceVersion`` is the version listed; with ``watch=true&resourceVersion=RV``
  the events after RV, newline-delimited JSON, on a chunked response held open.

Shapes as a real API server sends them: list items carry no ``kind``/``apiVersion``, watch
events do; every object has ``metadata.resourceVersion`` (a string; one counter for all);
errors are ``Status`` objects with ``Content-Type: application/json``. A watch from a
version older than the history kept gets HTTP 200 and one ``ERROR`` event holding a 410
``Status`` (the event recorded from a real cluster in kubernetes_asyncio 36.1.0's
``watch/watch_test.py``), or, with ``gone_as_http``, an HTTP 410 (what the API server
answers a list or watch it refuses before streaming).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlsplit

GROUP_PATH = "/apis/inference.networking.k8s.io/v1/namespaces/{ns}/inferencepools"
PODS_PATH = "/api/v1/namespaces/{ns}/pods"
STAMP = "2026-12-01T10:00:00Z"


def pod_object(
    name: str,
    ip: str,
    *,
    labels: Mapping[str, str],
    ready: bool = True,
    namespace: str,
    port: int = 8000,
) -> dict[str, Any]:
    """A vLLM pod as ``kubectl get pod -o json`` shows a running one (trimmed to the fields
    a kubelet always sets). ``ready=False``: Running, but its readiness probe fails."""
    flag = "True" if ready else "False"
    conditions = [
        {"type": "PodReadyToStartContainers", "status": "True"},
        {"type": "Initialized", "status": "True"},
        {"type": "Ready", "status": flag},
        {"type": "ContainersReady", "status": flag},
        {"type": "PodScheduled", "status": "True"},
    ]
    for c in conditions:
        c.update(lastProbeTime=None, lastTransitionTime=STAMP)
        if c["status"] == "False":
            c.update(reason="ContainersNotReady", message="containers with unready status: [vllm]")
    return {
        "metadata": {
            "name": name,
            "generateName": name.rsplit("-", 1)[0] + "-",
            "namespace": namespace,
            "uid": f"0b6f0f8e-5d6c-4b7a-9a51-{abs(hash(name)) % 10**12:012d}",
            "creationTimestamp": STAMP,
            "labels": dict(labels),
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": name.rsplit("-", 1)[0],
                    "uid": "5a0c",
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {
            "containers": [
                {
                    "name": "vllm",
                    "image": "vllm/vllm-openai:v0.32.0",
                    "ports": [{"containerPort": port, "protocol": "TCP"}],
                    "resources": {},
                    "terminationMessagePath": "/dev/termination-log",
                    "terminationMessagePolicy": "File",
                    "imagePullPolicy": "IfNotPresent",
                }
            ],
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 130,
            "dnsPolicy": "ClusterFirst",
            "serviceAccountName": "default",
            "nodeName": "node-1",
            "schedulerName": "default-scheduler",
        },
        "status": {
            "phase": "Running",
            "conditions": conditions,
            "hostIP": "10.0.0.5",
            "hostIPs": [{"ip": "10.0.0.5"}],
            "podIP": ip,
            "podIPs": [{"ip": ip}],
            "startTime": STAMP,
            "qosClass": "BestEffort",
            "containerStatuses": [
                {
                    "name": "vllm",
                    "ready": ready,
                    "restartCount": 0,
                    "started": True,
                    "image": "docker.io/vllm/vllm-openai:v0.32.0",
                    "imageID": "",
                    "containerID": "",
                    "state": {"running": {"startedAt": STAMP}},
                    "lastState": {},
                }
            ],
        },
    }


def pool_object(
    name: str, namespace: str, *, labels: Mapping[str, str], ports: list[int]
) -> dict[str, Any]:
    """An InferencePool as the API server returns it (defaults filled in by the CRD)."""
    return {
        "metadata": {
            "name": name,
            "namespace": namespace,
            "generation": 1,
            "uid": "3c1d2b8a-0f3e-4e59-8f43-3b1f0f8f2a11",
            "creationTimestamp": STAMP,
        },
        "spec": {
            "selector": {"matchLabels": dict(labels)},
            "targetPorts": [{"number": p} for p in ports],
            "appProtocol": "http",
            "endpointPickerRef": {
                "group": "",
                "kind": "Service",
                "name": "sluicegate-epp",
                "port": {"number": 9002},
                "failureMode": "FailClose",
            },
        },
        "status": {
            "parents": [
                {
                    "parentRef": {
                        "group": "gateway.networking.k8s.io",
                        "kind": "Gateway",
                        "name": "inference-gateway",
                        "namespace": namespace,
                    },
                    "controllerName": "gateway.envoyproxy.io/gatewayclass-controller",
                    "conditions": [
                        {
                            "type": "Accepted",
                            "status": "True",
                            "reason": "Accepted",
                            "message": "",
                            "observedGeneration": 1,
                            "lastTransitionTime": STAMP,
                        }
                    ],
                }
            ]
        },
    }


def status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


@dataclass
class _Event:
    version: int
    resource: str  # "pods" or "inferencepools"
    type: str
    object: dict[str, Any]


@dataclass
class FakeApiServer:
    namespace: str = "inference"
    version: int = 1000
    pools: dict[str, dict[str, Any]] = field(default_factory=dict)
    pods: dict[str, dict[str, Any]] = field(default_factory=dict)
    history: list[_Event] = field(default_factory=list)
    oldest: int = 0
    """A watch from a version older than this is told 410 Gone."""
    gone_as_http: bool = False
    failing: int | None = None
    """Answer every request with this status (a ``Status`` body) while set."""
    requests: list[str] = field(default_factory=list)
    _watches: set[asyncio.Queue[_Event | None]] = field(default_factory=set)
    _server: asyncio.Server | None = None
    _handlers: set[asyncio.Task[None]] = field(default_factory=set)
    _writers: set[asyncio.StreamWriter] = field(default_factory=set)
    url: str = ""

    async def start(self, host: str = "127.0.0.1") -> str:
        self._server = await asyncio.start_server(self._serve, host, 0)
        port = self._server.sockets[0].getsockname()[1]
        self.url = f"http://{host}:{port}"
        return self.url

    async def stop(self) -> None:
        self.end_watches()
        if self._server is not None:
            self._server.close()
        for writer in self._writers:
            writer.close()
        await asyncio.gather(*self._handlers, return_exceptions=True)
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 5)

    def kubeconfig(self) -> dict[str, Any]:
        """A kubeconfig pointing at this server (plain http, no credentials)."""
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "current-context": "fake",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": "fake", "user": {}}],
            "contexts": [
                {
                    "name": "fake",
                    "context": {"cluster": "fake", "user": "fake", "namespace": self.namespace},
                }
            ],
        }

    # -- changes, each one resourceVersion, sent to open watches --------------------------
    def put_pool(self, obj: dict[str, Any]) -> None:
        self._put("inferencepools", self.pools, obj)

    def delete_pool(self, name: str) -> None:
        self._record("inferencepools", "DELETED", self.pools.pop(name))

    def put_pod(self, obj: dict[str, Any]) -> None:
        self._put("pods", self.pods, obj)

    def delete_pod(self, name: str) -> None:
        self._record("pods", "DELETED", self.pods.pop(name))

    def _put(self, kind: str, objects: dict[str, dict[str, Any]], obj: dict[str, Any]) -> None:
        name = obj["metadata"]["name"]
        self._record(kind, "MODIFIED" if name in objects else "ADDED", obj)
        objects[name] = obj

    def expire_history(self) -> None:
        """Compaction: every version seen so far is too old to watch from; open watches end
        (as when the API server restarts), so clients come back with an old version."""
        self.oldest = self.version + 1
        self.history.clear()
        self.end_watches()

    def end_watches(self) -> None:
        for queue in self._watches:
            queue.put_nowait(None)

    def _record(self, resource: str, kind: str, obj: dict[str, Any]) -> None:
        self.version += 1
        obj["metadata"]["resourceVersion"] = str(self.version)
        event = _Event(self.version, resource, kind, json.loads(json.dumps(obj)))
        self.history.append(event)
        for queue in self._watches:
            queue.put_nowait(event)

    # -- HTTP ------------------------------------------------------------------------------
    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        self._writers.add(writer)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                method, target, _ = head.split(b"\r\n", 1)[0].decode().split(" ", 2)
                self.requests.append(target)
                if not await self._answer(method, target, writer):
                    break
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
            pass
        finally:
            writer.close()
            self._writers.discard(writer)
            self._handlers.discard(task)

    async def _answer(self, method: str, target: str, writer: asyncio.StreamWriter) -> bool:
        """Write one response; False when the connection is to be closed after it."""
        url = urlsplit(target)
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        if self.failing is not None:
            await _send_json(writer, self.failing, status(self.failing, "InternalError", "down"))
            return True
        resource, name = self._route(url.path)
        if method != "GET" or resource is None:
            await _send_json(
                writer,
                404,
                status(404, "NotFound", "the server could not find the requested resource"),
            )
            return True
        if name is not None:
            obj = self.pools.get(name)
            if obj is None:
                message = f'inferencepools.inference.networking.k8s.io "{name}" not found'
                await _send_json(writer, 404, status(404, "NotFound", message))
            else:
                await _send_json(writer, 200, _typed(resource, obj))
            return True
        if query.get("watch") in ("true", "1"):
            await self._watch(writer, resource, query)
            return False
        items = [o for o in self._objects(resource) if _selected(o, query)]
        kind = "PodList" if resource == "pods" else "InferencePoolList"
        api = "v1" if resource == "pods" else "inference.networking.k8s.io/v1"
        body = {
            "kind": kind,
            "apiVersion": api,
            "metadata": {"resourceVersion": str(self.version)},
            "items": items,
        }
        await _send_json(writer, 200, body)
        return True

    def _route(self, path: str) -> tuple[str | None, str | None]:
        pools = GROUP_PATH.format(ns=self.namespace)
        if path == PODS_PATH.format(ns=self.namespace):
            return "pods", None
        if path == pools:
            return "inferencepools", None
        if path.startswith(pools + "/"):
            return "inferencepools", path[len(pools) + 1 :]
        return None, None

    def _objects(self, resource: str) -> list[dict[str, Any]]:
        return list((self.pods if resource == "pods" else self.pools).values())

    async def _watch(
        self, writer: asyncio.StreamWriter, resource: str, query: Mapping[str, str]
    ) -> None:
        since = int(query.get("resourceVersion") or 0)
        if since and since < self.oldest:
            gone = status(410, "Gone", f"too old resource version: {since} ({self.oldest})")
            if self.gone_as_http:
                await _send_json(writer, 410, gone)
                return
            await _start_stream(writer)
            await _send_chunk(writer, {"type": "ERROR", "object": gone})
            await _end_stream(writer)
            return
        queue: asyncio.Queue[_Event | None] = asyncio.Queue()
        self._watches.add(queue)
        try:
            await _start_stream(writer)
            backlog = (
                [e for e in self.history if e.version > since]
                if since
                else [_Event(self.version, resource, "ADDED", o) for o in self._objects(resource)]
            )
            for event in backlog:
                await self._send_event(writer, event, resource, query)
            while (event := await queue.get()) is not None:
                await self._send_event(writer, event, resource, query)
            await _end_stream(writer)
        finally:
            self._watches.discard(queue)

    async def _send_event(
        self, writer: asyncio.StreamWriter, event: _Event, resource: str, query: Mapping[str, str]
    ) -> None:
        if event.resource == resource and _selected(event.object, query):
            await _send_chunk(
                writer, {"type": event.type, "object": _typed(resource, event.object)}
            )


def _typed(resource: str, obj: dict[str, Any]) -> dict[str, Any]:
    if resource == "pods":
        return {"kind": "Pod", "apiVersion": "v1", **obj}
    return {"kind": "InferencePool", "apiVersion": "inference.networking.k8s.io/v1", **obj}


def _selected(obj: Mapping[str, Any], query: Mapping[str, str]) -> bool:
    """``labelSelector`` (``k=v,...``) and ``fieldSelector`` (``metadata.name=N``)."""
    labels = obj["metadata"].get("labels") or {}
    for term in filter(None, query.get("labelSelector", "").split(",")):
        key, _, value = term.partition("=")
        if labels.get(key) != value:
            return False
    for term in filter(None, query.get("fieldSelector", "").split(",")):
        key, _, value = term.partition("=")
        if key != "metadata.name" or obj["metadata"]["name"] != value:
            return False
    return True


async def _send_json(writer: asyncio.StreamWriter, code: int, body: Mapping[str, Any]) -> None:
    data = json.dumps(body).encode()
    head = (
        f"HTTP/1.1 {code} {_REASONS.get(code, 'Error')}\r\nContent-Type: application/json"
        f"\r\nContent-Length: {len(data)}\r\n\r\n"
    )
    writer.write(head.encode() + data)
    await writer.drain()


async def _start_stream(writer: asyncio.StreamWriter) -> None:
    writer.write(
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
    )
    await writer.drain()


async def _send_chunk(writer: asyncio.StreamWriter, event: Mapping[str, Any]) -> None:
    line = json.dumps(event).encode() + b"\n"
    writer.write(b"%x\r\n%s\r\n" % (len(line), line))
    await writer.drain()


async def _end_stream(writer: asyncio.StreamWriter) -> None:
    writer.write(b"0\r\n\r\n")
    await writer.drain()


_REASONS = {
    200: "OK",
    404: "Not Found",
    410: "Gone",
    500: "Internal Server Error",
    503: "Service Unavailable",
    403: "Forbidden",
}
