"""The simulated engine's view reads the step time as the gateway's scraper does: the mean
inter-token latency over the last second, and the lowest such mean lately (what the decode
hold of ``headroom.decode_slowdown_max`` weighs)."""

from __future__ import annotations

import pytest

from emulator.profile import load_profile
from simulation.engine_adapter import EmulatedBackend
from simulation.ports import EngineRequest


def _run(backend: EmulatedBackend, until: float, now: float = 0.0) -> float:
    while now < until:
        step = backend.step(now)
        assert step is not None
        now = step.ends_at
        backend.view(now)
    return now


def test_the_step_time_is_the_profile_s_with_the_batch_it_holds() -> None:
    p = load_profile("cpu-tiny")
    backend = EmulatedBackend(p)
    assert backend.view(0.0).itl_s is None  # nothing decoded yet
    for i in range(8):
        backend.add(EngineRequest(f"r{i}", 1000, 2000), 0.0)
    now = _run(backend, 2.0)
    view = backend.view(now)
    model, running = p.engine.step_time, backend.engine.num_running
    backend.engine._sync_all()  # each running sequence's counts up to date
    context = sum(s.computed for s in backend.engine._running)
    assert running == 8
    # the last second's decode steps, their contexts a second's worth of tokens shorter
    newest = model.duration(0, running, context)
    oldest = model.duration(0, running, context - running * round(1.0 / newest))
    assert view.itl_s is not None and oldest * 0.99 <= view.itl_s <= newest * 1.01


def test_the_floor_is_the_lightest_batch_seen_and_the_step_grows_past_it() -> None:
    p = load_profile("cpu-tiny")
    backend = EmulatedBackend(p)
    backend.add(EngineRequest("alone", 100, 3000), 0.0)
    now = _run(backend, 1.5)
    light = backend.view(now).itl_s
    assert light is not None
    for i in range(7):
        backend.add(EngineRequest(f"long{i}", 3000, 1000), now)
    now = _run(backend, now + 3.0, now)
    view = backend.view(now)
    assert view.itl_floor_s == pytest.approx(light, rel=0.05)
    assert view.itl_s is not None and view.itl_s > 1.5 * view.itl_floor_s


def test_the_view_is_kept_while_nothing_moves_and_rebuilt_when_anything_does() -> None:
    """``view`` hands back the same object while the engine has not moved and no signal is
    due (the scheduler then keeps what it worked out from it); any add, abort or step, or
    a refresh falling due, shows in a new view."""
    backend = EmulatedBackend(load_profile("cpu-tiny"))
    first = backend.view(0.0)
    assert backend.view(0.1) is first
    backend.add(EngineRequest("a", 100, 50), 0.1)
    queued = backend.view(0.1)
    assert queued is not first and queued.waiting == 1.0
    assert backend.view(0.2) is queued
    step = backend.step(0.2)
    assert step is not None
    running = backend.view(0.2)
    assert running is not queued and (running.running, running.waiting) == (1.0, 0.0)
    backend.abort("a")
    aborted = backend.view(0.2)
    assert aborted is not running and aborted.running == 0.0
    assert backend.view(0.2 + 0.5) is not aborted  # the step time is read again (SCRAPE_S)
