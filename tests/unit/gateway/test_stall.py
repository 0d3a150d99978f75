"""The silence bounds follow each backend's measurements, within the configured floors."""

from __future__ import annotations

import asyncio

from gateway.config.schema import StallConfig
from gateway.forward.stall import StallBounds, StallWatch


def test_unmeasured_backend_is_bounded_by_the_read_timeout_only() -> None:
    bounds = StallBounds(StallConfig(), read_timeout_s=600.0)
    assert bounds.first_token_s("a") == bounds.inter_token_s("a") == 600.0


def test_bounds_are_a_multiple_of_the_measured_p99_never_below_the_floor() -> None:
    cfg = StallConfig(first_token_factor=10, min_first_token_s=1.0, inter_token_factor=50,
                      min_inter_token_s=0.5)  # fmt: skip
    bounds = StallBounds(cfg, read_timeout_s=600.0)
    for i in range(101):
        bounds.observe_first("a", 0.1 + 0.001 * i)  # p99: the 99th of 100, about 0.2
        bounds.observe_gap("a", 0.001)
    assert 10 * 0.19 <= bounds.first_token_s("a") <= 10 * 0.2
    assert bounds.first_token_s("a", engine_ttft_p90_s=0.3) == 10 * 0.3  # the engine's, larger
    assert bounds.inter_token_s("a") == 0.5  # 50 x 1 ms is below the floor
    assert bounds.inter_token_s("b") == 600.0  # measured per backend


def test_fixed_bounds_replace_the_measured_ones_and_the_read_timeout_caps_all() -> None:
    bounds = StallBounds(StallConfig(first_token_s=7.0, inter_token_s=900.0), read_timeout_s=60)
    assert bounds.first_token_s("a") == 7.0
    assert bounds.inter_token_s("a") == 60.0


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
