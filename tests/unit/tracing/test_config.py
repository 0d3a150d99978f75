"""The ``tracing:`` section as ``check-config`` sees it: each error at its line, and a
plain word when tracing is on but the ``tracing`` extra is not installed."""

from __future__ import annotations

import importlib
import sys
import types
from pathlib import Path

import pytest

from commands.check_config import check_file, main
from gateway.tracing.config import (
    EXTRA_MODULES,
    TracingConfig,
    missing_modules,
    overwritten_protos,
)

BASE = "backends:\n  - name: a\n    url: http://a.test\n    models: [tiny]\n"


def _with(tmp_path: Path, section: str) -> Path:
    path = tmp_path / "c.yaml"
    path.write_text(BASE + section)
    return path


def test_the_section_is_off_by_default_and_valid_when_on(tmp_path: Path) -> None:
    assert TracingConfig().enabled is False
    section = (
        "tracing:\n  enabled: true\n  sample_ratio: 0.25\n  service_name: gw-eu\n"
        "  endpoint: http://collector:4318/v1/traces\n"
    )
    loaded, issues = check_file(_with(tmp_path, section))
    assert issues == []
    assert loaded is not None and loaded.config.tracing.sample_ratio == 0.25


def test_each_bad_setting_is_located(tmp_path: Path) -> None:
    lines = BASE.count("\n")
    section = "tracing:\n  enabled: true\n  sample_ratio: 1.5\n  endpoint: collector:4318\n  x: 1\n"
    _loaded, issues = check_file(_with(tmp_path, section))
    located = {".".join(map(str, i.loc)): i.line for i in issues}
    assert located == {
        "tracing.sample_ratio": lines + 3,
        "tracing.endpoint": lines + 4,
        "tracing.x": lines + 5,
    }


def test_tracing_on_without_the_extra_says_how_to_install_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, EXTRA_MODULES[0], None)  # as if not installed
    assert missing_modules() == [EXTRA_MODULES[0]]
    path = _with(tmp_path, "tracing:\n  enabled: true\n")
    assert main([str(path)]) == 1
    err = capsys.readouterr().err
    assert f"{path}:" in err and "tracing:" in err
    assert "pip install 'sluicegate[tracing]'" in err
    _loaded, issues = check_file(_with(tmp_path, "tracing:\n  enabled: false\n"))
    assert issues == []  # off, the extra is not needed


def test_tracing_on_with_an_older_copy_of_the_otlp_protos_says_how_to_repair_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """xds-protos (the epp extra) ships its own older ``opentelemetry/proto`` files; when
    pip installs it last, the exporter cannot be imported: check-config says so."""
    older = types.ModuleType("opentelemetry.proto.common.v1.common_pb2")  # no InstrumentationScope
    monkeypatch.setitem(sys.modules, "opentelemetry.proto.common.v1.common_pb2", older)
    package = importlib.import_module("opentelemetry.proto.common.v1")
    monkeypatch.setattr(package, "common_pb2", older, raising=False)
    path = _with(tmp_path, "tracing:\n  enabled: true\n")
    assert main([str(path)]) == 1
    err = capsys.readouterr().err
    assert "pip install --force-reinstall --no-deps opentelemetry-proto==" in err
    assert overwritten_protos() is not None
    monkeypatch.undo()
    assert overwritten_protos() is None  # the copy this venv has is whole
