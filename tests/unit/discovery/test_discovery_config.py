"""``discovery:`` in the config file, as ``sluicegate check-config`` reports it."""

from __future__ import annotations

from pathlib import Path

import pytest

from commands.check_config import main

DISCOVERED = """\
discovery:
  kubernetes:
    inference_pool: vllm-llama
    namespace: inference
    models: [llama]
    max_num_seqs: 64
"""
LISTED = """\
backends:
  - {name: a, url: "http://10.0.0.1:8000", models: [llama]}
"""


def _check(tmp_path: Path, text: str) -> int:
    path = tmp_path / "gateway.yaml"
    path.write_text(text)
    return main([str(path)])


def test_a_discovered_pool_is_a_valid_source_of_backends(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _check(tmp_path, DISCOVERED) == 0
    assert "the ready pods of InferencePool vllm-llama" in capsys.readouterr().out


def test_backends_listed_and_discovered_is_refused_at_discovery(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _check(tmp_path, LISTED + DISCOVERED) == 1
    assert "gateway.yaml:3: discovery: the backends are either listed or discovered" in (
        capsys.readouterr().err
    )


def test_no_backend_from_anywhere_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _check(tmp_path, "server: {port: 8080}\n") == 1
    assert "backends: at least one backend is needed (or a discovery: section)" in (
        capsys.readouterr().err
    )


@pytest.mark.parametrize(
    ("line", "field"),
    [
        ("    inference_pool: Not_A_Name\n", "inference_pool"),
        ("    models: []\n", "models"),
        ("    resync_s: 0\n", "resync_s"),
    ],
)
def test_a_bad_discovery_field_is_located(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], line: str, field: str
) -> None:
    lines = DISCOVERED.splitlines(keepends=True)
    key = line.split(":")[0]
    text = "".join(line if ln.split(":")[0] == key else ln for ln in lines)
    if key not in DISCOVERED:
        text += line
    assert _check(tmp_path, text) == 1
    assert f"discovery.kubernetes.{field}" in capsys.readouterr().err
