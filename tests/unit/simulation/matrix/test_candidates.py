"""``sluicegate evaluate --policies``: shipped presets by name, other policies by a YAML
file's path, judged beside the default."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from simulation.matrix.evaluate import chosen_policies, shipped_policies


def test_a_yaml_path_joins_the_default_and_the_presets_named(tmp_path: Path) -> None:
    path = tmp_path / "candidate.yaml"
    path.write_text("policy:\n  name: wider\n  headroom: {reserve_fraction: 0.5}\n")
    chosen = chosen_policies({"fair-share", str(path)})
    assert [name for name, _ in chosen] == ["default", "fair-share", "wider"]
    assert chosen[-1][1]["headroom"] == {"reserve_fraction": 0.5}


def test_no_names_is_every_shipped_policy() -> None:
    assert chosen_policies(None) == shipped_policies()


def test_no_names_without_shipped_presets_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An installed package run outside a checkout finds no presets: judging the default
    against nothing is refused, not printed as a matrix of one policy."""
    empty = tmp_path / "presets"
    empty.mkdir()
    monkeypatch.setattr("simulation.run_cli.PRESET_DIRS", (empty,))
    monkeypatch.setattr("simulation.matrix.evaluate.PRESET_DIRS", (empty,))
    with pytest.raises(ValueError, match="no shipped presets"):
        chosen_policies(None)
    path = tmp_path / "candidate.yaml"
    path.write_text("policy:\n  name: wider\n")
    assert [n for n, _ in chosen_policies({str(path)})] == ["default", "wider"]


def test_a_candidate_named_like_a_preset_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "clash.yaml"
    path.write_text("policy:\n  name: codel\n")
    with pytest.raises(ValueError, match="share a name"):
        chosen_policies({"codel", str(path)})


def test_a_name_that_is_no_preset_nor_file_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown policy"):
        chosen_policies({"no-such-policy"})


def test_without_matplotlib_evaluate_stops_before_its_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The heat map is the matrix's point: without matplotlib the command says so at once
    (exit 2), not after an hour of runs; ``--no-chart`` runs without it."""
    from simulation.matrix import cli

    ran: list[int] = []

    def evaluate(cells: list[Any], *_: Any, **__: Any) -> list[Any]:
        ran.append(len(cells))
        return []

    monkeypatch.setattr(cli, "chart_available", lambda: False)
    monkeypatch.setattr(cli, "evaluate", evaluate)
    monkeypatch.setattr(cli, "summary", lambda rows: [])
    monkeypatch.setattr(cli, "write_csv", lambda rows, path: None)
    args = ["--workloads", "chat", "--profiles", "cpu-tiny", "--loads", "1", "--backends", "1"]
    assert cli.main([*args, "--out", str(tmp_path / "chart")]) == 2
    assert "matplotlib" in capsys.readouterr().err and ran == []
    assert cli.main([*args, "--no-chart", "--out", str(tmp_path / "plain")]) == 0
    assert ran == [1]
