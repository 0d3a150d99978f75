"""``sluicegate emulate`` argument handling (the server itself is tested over HTTP)."""

from __future__ import annotations

import pytest

from emulator.cli import main, parse_args


def test_flags_map_to_the_emulator_spec() -> None:
    args = parse_args(
        [
            "--profile",
            "cpu-medium",
            "--model-name",
            "m",
            "--port",
            "9001",
            "--speed",
            "4",
            "--seed",
            "7",
            "--max-num-queued-reqs",
            "12",
        ]
    )
    assert (args.profile, args.model_name, args.port) == ("cpu-medium", "m", 9001)
    assert (args.speed, args.seed, args.max_num_queued_reqs) == (4.0, 7, 12)


def test_a_non_positive_speed_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--speed", "0"]) == 2
    assert "--speed" in capsys.readouterr().out
