"""A short soak (``bench/soak``): mixed traffic in rounds against ``sluicegate serve`` in
front of two emulator processes (streams and not, clients leaving mid-stream and before the
answer, 429s from a quota and from deadlines, 401s, engine-busy 503s, a hot reload every
two seconds, every third one invalid). After every round, once the gateway has drained:
every request ended in exactly one outcome and one record, decisions add up to dispatch
attempts plus rejections, nothing is queued or in flight, every charged token was released,
every reload was counted as what it was, and the gateway's open file descriptors at rest
do not grow with the traffic: a descriptor leaked per request (or per client that left)
would add dozens a round; at rest the count moves only by the few idle keep-alive
connections the upstream pools and probes happen to hold. RSS is left to the long soak
(``python -m bench.soak``): in under a minute the gateway is still warming up its caches and
allocator arenas."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.soak.run import Settings, soak

pytestmark = pytest.mark.emulator


async def test_a_short_soak_adds_up_and_keeps_its_descriptors(tmp_path: Path) -> None:
    settings = Settings(
        duration_s=64.0,  # three rounds of 8 s and their quiet points (of 7-10 s)
        workdir=tmp_path,
        round_s=8.0,
        workers=8,
        think_s=0.1,
        reload_every_s=2.0,
        drain_s=2.0,
        settle_s=10.0,
    )
    report = await soak(settings, say=lambda _line: None)
    assert report.problems == []
    assert report.tally.scheduled > 0 and report.writes[1] > 0
    seen = {what for _kind, what in report.tally.seen}
    assert {"200", "429", "401", "left"} <= seen, "the mix did not reach every path"
    at_rest = [s.fds for s in report.quiet[1:]]
    assert len(at_rest) >= 3
    per_round = report.tally.scheduled // len(at_rest)
    grew = max(at_rest) - at_rest[0]
    assert per_round >= 60, "too few requests a round to tell a leak from idle connections"
    assert grew < per_round // 20, f"open fds at rest grew from round to round: {at_rest}"
