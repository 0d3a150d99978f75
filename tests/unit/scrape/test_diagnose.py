from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest

from commands.diagnose import live, load_fleet, main
from gateway.backends.scrape.scraper import ScrapeTarget
from tests.unit.scrape.conftest import FIXTURES

UNDER_LOAD = FIXTURES / "vllm-0.32-metrics-under-load.txt"
PREEMPTION = FIXTURES / "vllm-0.32-metrics-preemption.txt"
_CUMULATIVE = re.compile(r"^(vllm:\S+?_(?:bucket|sum|count|total))(\{.*\})? \S+$")


def zeroed(text: str) -> str:
    """The same server before any request: every counter and histogram at 0."""
    return "\n".join(_CUMULATIVE.sub(r"\1\2 0.0", line) for line in text.splitlines())


def table(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith("| ")]


def test_one_dump_prints_the_seed_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--from-dumps", str(UNDER_LOAD), "--max-num-seqs", "8"]) == 0
    out = capsys.readouterr().out
    # decode: 29.6567 s of 30.6482 s e2e over 14 requests (sums read from the dump)
    assert "| Decode     |     2.118 s |  96.8% |" in out
    assert "| End to end |     2.189 s |        |" in out
    assert "first bucket" in out  # queue times all under 0.3 s: said, not invented
    assert "8.0 concurrent requests, limited by max_num_seqs" in out
    assert "131072 / 9.5" in out


def test_two_dumps_diagnose_the_window_between_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    start = tmp_path / "start.txt"
    start.write_text(zeroed(UNDER_LOAD.read_text()))
    assert main(["--from-dumps", str(UNDER_LOAD)]) == 0
    cumulative = capsys.readouterr().out
    assert main(["--from-dumps", str(start), str(UNDER_LOAD)]) == 0
    windowed = capsys.readouterr().out
    assert table(windowed) == table(cumulative)
    assert main(["--from-dumps", str(UNDER_LOAD), str(UNDER_LOAD)]) == 0
    assert "no request finished in the window" in capsys.readouterr().out


def test_long_outputs_are_flagged_next_to_capacity(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--from-dumps", str(PREEMPTION)]) == 0
    out = capsys.readouterr().out
    assert "limited by kv_cache" in out
    assert "Outputs are long" in out  # 2048 KV tokens, ~900-token outputs: 11 preemptions
    assert "pass --max-num-seqs" in out


def test_waves_fingerprint_when_queue_p90_is_far_above_p50(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # 29 requests, 16 served at once: 16 queue < 0.3 s, 13 wait ~30 s
    bounds = (0.3, 0.5, 1.0, 10.0, 20.0, 30.0, 40.0)
    cum = (16, 16, 16, 16, 16, 16, 29)
    lines = [
        f'vllm:request_queue_time_seconds_bucket{{le="{b}"}} {c}'
        for b, c in zip(bounds, cum, strict=True)
    ]
    lines += ['vllm:request_queue_time_seconds_bucket{le="+Inf"} 29']
    lines += ["vllm:request_queue_time_seconds_count 29", "vllm:request_queue_time_seconds_sum 400"]
    dump = tmp_path / "waves.txt"
    dump.write_text("\n".join(lines) + "\n")
    assert main(["--from-dumps", str(dump)]) == 0
    out = capsys.readouterr().out
    assert "'waves' fingerprint" in out
    assert "bucket 30..40 s" in out


@pytest.mark.parametrize(
    "argv",
    [[], ["--from-dumps", "a", "b", "c"], ["--url", "http://x", "--from-dumps", "a"]],
)
def test_usage_errors_exit_2(argv: list[str], tmp_path: Path) -> None:
    if argv[:1] == ["--from-dumps"]:
        for name in argv[1:]:
            (tmp_path / name).write_text("vllm:num_requests_running 1\n")
        argv = ["--from-dumps", *(str(tmp_path / n) for n in argv[1:])]
    assert main(argv) == 2


def test_garbage_dump_exits_1(tmp_path: Path) -> None:
    junk = tmp_path / "junk.txt"
    junk.write_text("<html>502</html>")
    assert main(["--from-dumps", str(junk)]) == 1


def test_fleet_config_lists_backends(tmp_path: Path) -> None:
    config = tmp_path / "fleet.yaml"
    config.write_text(
        "backends:\n"
        "  - {name: a, url: 'http://127.0.0.1:8001/v1', max_num_seqs: 8}\n"
        "  - {url: 'http://127.0.0.1:8002'}\n"
    )
    a, b = load_fleet(config, "vllm-0.32")
    assert (a.name, a.metrics_url, a.max_num_seqs) == ("a", "http://127.0.0.1:8001/metrics", 8)
    assert (b.metrics_url, b.max_num_seqs) == ("http://127.0.0.1:8002/metrics", None)
    bad = tmp_path / "bad.yaml"
    bad.write_text("backends: []\n")
    assert main(["--config", str(bad)]) == 2


async def test_live_mode_samples_a_backend(capsys: pytest.CaptureFixture[str]) -> None:
    body = UNDER_LOAD.read_text()

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.host == "down.test":
            raise httpx.ConnectError("refused", request=request)
        return httpx.Response(200, text=body)

    targets = [
        ScrapeTarget("up", "http://up.test/metrics", max_num_seqs=8),
        ScrapeTarget("down", "http://down.test/metrics"),
    ]
    client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    status = await live(targets, window_s=0.2, interval_s=0.1, client=client)
    out = capsys.readouterr().out
    assert status == 1  # one backend could not be read
    assert "== up @ http://up.test/metrics (window" in out
    assert "no request finished in the window" in out  # same body each scrape: no new requests
    assert "== down: no usable /metrics (ConnectError" in out


def test_the_gateway_config_is_a_fleet_config() -> None:
    example = Path(__file__).parents[3] / "config.example.yaml"
    targets = load_fleet(example, "vllm-0.32")
    assert targets, "config.example.yaml lists backends"
    assert all(t.metrics_url.endswith("/metrics") for t in targets)
    assert any(t.max_num_seqs is not None for t in targets)
