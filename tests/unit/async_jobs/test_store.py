"""The async job store: bounded in time (TTL, pending wait), bytes (per job and in total)
and jobs per tenant; one tenant never reaches another's jobs. The clock is a variable."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from gateway.async_jobs.config import AsyncJobsConfig
from gateway.async_jobs.store import (
    JobState,
    JobStore,
    Result,
    StoreLimits,
    TenantFull,
)
from gateway.config.schema import ConfigError, load_config_bytes
from tests.unit.policies.helpers import ManualClock

LIMITS = StoreLimits(
    max_pending_per_tenant=2,
    max_pending_s=60.0,
    result_ttl_s=30.0,
    max_result_bytes=100,
    max_total_result_bytes=250,
)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def store(clock: ManualClock) -> JobStore:
    return JobStore(LIMITS, clock=clock)


def ok(size: int) -> Result:
    return Result(200, b"x" * size)


def error_code(result: Result | None) -> str:
    assert result is not None
    code: str = json.loads(result.body)["error"]["code"]
    return code


def test_a_result_is_kept_for_its_ttl_then_dropped(store: JobStore, clock: ManualClock) -> None:
    job = store.add("alice", work="w")
    clock.now += 50.0  # long pending does not count against the result's TTL
    assert store.finish(job, JobState.DONE, ok(10)) is JobState.DONE
    assert job.work is None, "the request is not kept once the job ended"
    clock.now += LIMITS.result_ttl_s - 0.001
    assert store.sweep().dropped == []
    assert store.get(job.id, "alice") is job
    clock.now += 0.001
    assert store.sweep().dropped == [job]
    assert store.get(job.id, "alice") is None
    assert store.result_bytes == 0


def test_a_job_pending_too_long_expires_and_its_error_is_kept(
    store: JobStore, clock: ManualClock
) -> None:
    job = store.add("alice", work="w")
    clock.now += LIMITS.max_pending_s - 0.001
    assert store.sweep().expired == []
    clock.now += 0.001
    assert store.sweep().expired == [job]
    assert job.state is JobState.EXPIRED
    assert job.result is not None and job.result.status == 503
    assert error_code(job.result) == "async_job_expired"
    assert store.pending("alice") == 0
    assert store.finish(job, JobState.DONE, ok(1)) is None, "one ending only"


def test_a_running_job_does_not_expire(store: JobStore, clock: ManualClock) -> None:
    job = store.add("alice", work="w")
    assert store.start(job)
    clock.now += LIMITS.max_pending_s * 10
    assert store.sweep().expired == []
    assert job.state is JobState.RUNNING
    store.requeue(job)  # the backend refused it: waiting again, and bounded again
    assert store.sweep().expired == [job]


def test_a_result_over_the_per_job_bound_ends_the_job_as_an_error(store: JobStore) -> None:
    job = store.add("alice", work="w")
    assert store.finish(job, JobState.DONE, ok(LIMITS.max_result_bytes + 1)) is JobState.FAILED
    assert job.result is not None and job.result.status == 507
    assert error_code(job.result) == "async_result_too_large"
    assert store.result_bytes == job.size == 0


def test_the_total_bound_fails_the_result_that_does_not_fit_and_keeps_the_others(
    store: JobStore,
) -> None:
    store.limits = StoreLimits(10, 60.0, 30.0, 100, 250)
    kept = [store.add("alice", work=i) for i in range(3)]
    assert store.finish(kept[0], JobState.DONE, ok(100)) is JobState.DONE
    assert store.finish(kept[1], JobState.DONE, ok(100)) is JobState.DONE
    assert store.finish(kept[2], JobState.DONE, ok(100)) is JobState.FAILED
    assert error_code(kept[2].result) == "async_result_too_large"
    assert [j.state for j in kept[:2]] == [JobState.DONE, JobState.DONE]
    assert store.result_bytes <= 250
    store.remove(kept[0])  # room again once a result is let go
    later = store.add("alice", work="w")
    assert store.finish(later, JobState.DONE, ok(100)) is JobState.DONE


def test_pending_jobs_are_bounded_per_tenant(store: JobStore) -> None:
    first = store.add("alice", work=1)
    store.add("alice", work=2)
    with pytest.raises(TenantFull):
        store.add("alice", work=3)
    store.add("bob", work=1)  # another tenant's bound is its own
    store.finish(first, JobState.CANCELLED, Result(499, b""))
    store.add("alice", work=3)  # an ended job frees its place
    assert store.pending("alice") == 2 and store.pending() == 3


def test_one_tenant_never_reaches_another_tenants_job(store: JobStore) -> None:
    job = store.add("alice", work="w")
    assert store.get(job.id, "bob") is None
    assert store.get(job.id, "alice") is job
    assert store.get("job_" + "0" * 32, "alice") is None


def test_ids_are_not_guessable_from_each_other(store: JobStore) -> None:
    ids = {store.add(f"t{i}", work=i).id for i in range(50)}
    assert len(ids) == 50
    assert all(len(i) == len("job_") + 32 for i in ids)


def test_next_due_is_the_earliest_expiry_or_ttl(store: JobStore, clock: ManualClock) -> None:
    assert store.next_due() is None
    pending = store.add("alice", work=1)
    ended = store.add("alice", work=2)
    store.finish(ended, JobState.DONE, ok(1))
    assert store.next_due() == min(pending.start_by, clock.now + LIMITS.result_ttl_s)


def test_check_config_locates_an_async_class_that_is_not_listed() -> None:
    raw = (
        b"backends: [{name: a, url: 'http://x', models: [m]}]\n"
        b"workload_classes: [interactive]\nasync_jobs:\n  enabled: true\n"
    )
    with pytest.raises(ConfigError) as err:
        load_config_bytes(raw)
    assert [i.loc for i in err.value.issues] == [("async_jobs", "workload_class")]
    assert err.value.issues[0].line == 3


def test_the_handoff_is_off_by_default_and_bounds_are_coherent() -> None:
    assert not AsyncJobsConfig().enabled
    with pytest.raises(ValidationError, match="max_result_bytes"):
        AsyncJobsConfig(max_result_bytes=10, max_total_result_bytes=5)
