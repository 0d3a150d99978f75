"""An InferencePool and its pods, as an API server returns them, to backends."""

from __future__ import annotations

import copy

import pytest

from gateway.backends.discovery.inference_pool import (
    PoolSpecError,
    backends,
    pool_spec,
    serving_address,
)
from gateway.config.schema import KubernetesDiscoveryConfig
from tests.unit.discovery.fake_apiserver import pod_object, pool_object

NS = "inference"
LABELS = {"app": "vllm", "model": "llama"}
SETTINGS = KubernetesDiscoveryConfig(
    inference_pool="pool", models=["llama"], max_num_seqs=64, max_model_len=4096
)


def test_the_pool_spec_is_read_from_the_v1_fields() -> None:
    spec = pool_spec(pool_object("pool", NS, labels=LABELS, ports=[8000, 8001]))
    assert spec.labels == LABELS
    assert spec.label_selector == "app=vllm,model=llama"
    assert spec.ports == (8000, 8001)
    assert spec.endpoint_picker == "sluicegate-epp:9002"


@pytest.mark.parametrize(
    "spec",
    [
        {"selector": {"matchLabels": {}}, "targetPorts": [{"number": 8000}]},
        {"selector": {"matchLabels": {"app": "vllm"}}, "targetPorts": []},
        {"selector": {"matchLabels": {"app": "vllm"}}, "targetPorts": [{"number": 0}]},
        {"selector": {"matchLabels": {"app": "vllm"}}},
    ],
)
def test_a_pool_without_selector_or_ports_is_refused(spec: dict[str, object]) -> None:
    with pytest.raises(PoolSpecError):
        pool_spec({"spec": spec})


def test_only_ready_matching_live_pods_with_an_ip_serve() -> None:
    ready = pod_object("vllm-0", "10.1.0.7", labels=LABELS, namespace=NS)
    assert serving_address(ready, LABELS) == "10.1.0.7"
    unready = pod_object("vllm-1", "10.1.0.8", labels=LABELS, namespace=NS, ready=False)
    assert serving_address(unready, LABELS) is None
    deleting = copy.deepcopy(ready)
    deleting["metadata"]["deletionTimestamp"] = "2026-12-01T10:05:00Z"
    assert serving_address(deleting, LABELS) is None
    pending = copy.deepcopy(ready)
    del pending["status"]["podIP"]
    assert serving_address(pending, LABELS) is None
    relabelled = pod_object("vllm-2", "10.1.0.9", labels={"app": "vllm"}, namespace=NS)
    assert serving_address(relabelled, LABELS) is None


def test_one_backend_per_serving_pod_named_after_it() -> None:
    spec = pool_spec(pool_object("pool", NS, labels=LABELS, ports=[8000]))
    pods = [
        pod_object("vllm-b", "10.1.0.8", labels=LABELS, namespace=NS),
        pod_object("vllm-a", "10.1.0.7", labels=LABELS, namespace=NS),
        pod_object("vllm-c", "10.1.0.9", labels=LABELS, namespace=NS, ready=False),
    ]
    found = backends(spec, pods, SETTINGS)
    assert [(b.name, b.url) for b in found] == [
        ("vllm-a", "http://10.1.0.7:8000"),
        ("vllm-b", "http://10.1.0.8:8000"),
    ]
    assert all(b.models == ["llama"] and b.max_num_seqs == 64 for b in found)
    assert all(b.max_model_len == 4096 for b in found)


def test_several_target_ports_make_one_backend_each_and_ipv6_is_bracketed() -> None:
    spec = pool_spec(pool_object("pool", NS, labels=LABELS, ports=[8000, 8001]))
    pods = [pod_object("vllm-0", "fd00::7", labels=LABELS, namespace=NS)]
    found = backends(spec, pods, SETTINGS)
    assert [(b.name, b.url) for b in found] == [
        ("vllm-0:8000", "http://[fd00::7]:8000"),
        ("vllm-0:8001", "http://[fd00::7]:8001"),
    ]
