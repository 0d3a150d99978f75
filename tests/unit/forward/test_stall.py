"""The silence bounds follow each backend's measurements, within the configured floors."""

from __future__ import annotations

import asyncio

import pytest
from pydantic import ValidationError

from gateway.config.schema import StallConfig
from gateway.forward.stall import StallBounds, StallWatch


def test_unmeasured_backend_is_bounded_by_the_read_timeout_only() -> None:
    bounds = StallBounds(StallConfig(), read_timeout_s=600.0)
    assert bounds.first_token_s() == bounds.inter_token_s("a") == 600.0
    assert bounds.progress_left("a") is None  # no scraper: progress is not watched


def test_the_inter_token_bound_is_a_multiple_of_the_measured_p99_never_below_the_floor() -> None:
    bounds = StallBounds(StallConfig(inter_token_factor=50, min_inter_token_s=0.5), 600.0)
    for _ in range(101):
        bounds.observe_gap("a", 0.001)
    assert bounds.inter_token_s("a") == 0.5  # 50 x 1 ms is below the floor
    for _ in range(101):
        bounds.observe_gap("a", 0.1)
    assert bounds.inter_token_s("a") == 50 * 0.1
    assert bounds.inter_token_s("b") == 600.0  # measured per backend


def test_fixed_bounds_replace_the_measured_ones_and_the_read_timeout_caps_all() -> None:
    bounds = StallBounds(StallConfig(first_token_s=7.0, inter_token_s=900.0), read_timeout_s=60)
    assert bounds.first_token_s() == 7.0
    assert bounds.inter_token_s("a") == 60.0


def test_removed_first_token_fields_say_what_replaced_them() -> None:
    with pytest.raises(ValidationError, match="progress_factor"):
        StallConfig.model_validate({"min_first_token_s": 15.0})


async def test_the_watch_cuts_when_the_backend_stops_making_progress() -> None:
    asked: list[float] = []

    def left(held_s: float) -> float:
        asked.append(held_s)
        return 0.01 - held_s  # stalled once the attempt has been on it for 10 ms

    watch = StallWatch(None, down=None, gone=None, progress=left)
    await asyncio.wait_for(watch.cut, 10.0)
    assert watch.reason == "stalled" and asked[-1] >= 0.01
    moving = StallWatch(600.0, down=None, gone=None, progress=lambda held_s: 0.01)
    await asyncio.sleep(0.1)  # asked again and again; never stalled while it moves
    assert not moving.cut.done()
    moving.close()


async def test_the_watch_cuts_on_silence_and_on_down_and_says_why() -> None:
    silent = StallWatch(0.001, down=None, gone=None)
    await asyncio.wait_for(silent.cut, 10.0)
    assert silent.reason == "silent"

    down: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    gone: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    watched = StallWatch(None, down=down, gone=gone)
    gone.cancel()  # the handler stopped listening: not a reason to cut
    down.set_result(None)
    await asyncio.wait_for(watched.cut, 10.0)
    assert watched.reason == "down"
    watched.close()


async def test_watches_on_one_loop_each_cut_at_their_own_deadline() -> None:
    far = StallWatch(600.0, down=None, gone=None)  # arms the loop's timer first
    near = StallWatch(0.01, down=None, gone=None)  # nearer: moves it
    later = StallWatch(0.05, down=None, gone=None)  # due after near: armed again for it
    closed = StallWatch(0.001, down=None, gone=None)
    closed.close()  # its attempt ended: never cut
    await asyncio.wait_for(near.cut, 10.0)
    await asyncio.wait_for(later.cut, 10.0)
    assert near.reason == later.reason == "silent"
    assert closed.reason is None and not far.cut.done()
    far.close()
