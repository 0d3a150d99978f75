"""Config errors are all reported, each with its file line; check-config exits non-zero."""

from __future__ import annotations

from pathlib import Path

import pytest

from commands.check_config import check_file, main
from gateway.config.schema import ConfigError, load_config, load_config_bytes

BAD = """\
server:
  port: 99999
tenants:
  - name: acme
    weight: -1
backends:
  - name: a
    url: ftp://nowhere
    models: [tiny]
policy:
  limit:
    type: no_such_limit
  bogus: 1
"""


def test_every_error_is_reported_with_its_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(BAD)
    loaded, issues = check_file(path)
    assert loaded is None
    located = {".".join(map(str, i.loc)): i.line for i in issues}
    assert located["server.port"] == 2
    assert located["tenants.0.weight"] == 5
    assert located["backends.0.url"] == 8
    assert located["policy.bogus"] == 13
    assert any(key.startswith("policy.limit") and line in (11, 12) for key, line in located.items())
    assert all(str(i).startswith(f"{path}:{i.line}: ") for i in issues)


def test_check_config_exit_status(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(BAD)
    assert main([str(bad)]) == 1
    assert f"{bad}:2: server.port" in capsys.readouterr().err
    assert main([str(Path(__file__).parents[3] / "config.example.yaml")]) == 0


def test_yaml_syntax_error_and_duplicate_keys_are_located() -> None:
    with pytest.raises(ConfigError) as info:
        load_config_bytes(b"server:\n  port: 1\n  port: 2\nbackends: []\n", "dup.yaml")
    assert info.value.issues[0].line == 3
    with pytest.raises(ConfigError) as info:
        load_config_bytes(b"server: [\n", "broken.yaml")
    assert "not valid YAML" in info.value.issues[0].message


def test_cross_references_are_checked() -> None:
    text = b"""
auth: {anonymous_tenant: ghost}
tenants: [{name: t, workload_classes: [vip]}]
backends: [{name: a, url: "http://a", models: [m]}, {name: a, url: "http://b", models: [m]}]
"""
    with pytest.raises(ConfigError) as info:
        load_config_bytes(text, "x.yaml")
    message = str(info.value)
    assert "ghost" in message and "vip" in message and "duplicate backend" in message


def test_version_is_a_hash_of_the_bytes(tmp_path: Path) -> None:
    a, b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    a.write_text("backends: [{name: a, url: 'http://a', models: [m]}]\n")
    b.write_text("backends: [{name: a, url: 'http://a', models: [m]}]\n# comment\n")
    assert load_config(a).version != load_config(b).version
    assert load_config(a).version == load_config(a).version


def test_serve_refuses_an_invalid_config(tmp_path: Path, capsys) -> None:
    from commands.serve import main as serve

    bad = tmp_path / "bad.yaml"
    bad.write_text(BAD)
    assert serve(["--config", str(bad)]) == 2
    assert f"{bad}:5: tenants.0.weight" in capsys.readouterr().err


PRESETS = sorted((Path(__file__).parents[3] / "presets").glob("*.yaml"))


@pytest.mark.parametrize("preset", PRESETS, ids=lambda p: p.stem)
def test_check_config_accepts_every_preset_as_a_policy(preset: Path) -> None:
    assert main([str(preset)]) == 0


def test_check_config_locates_an_error_in_a_policy_only_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "preset.yaml"
    path.write_text("policy:\n  limit:\n    type: no_such_limit\n")
    assert main([str(path)]) == 1
    err = capsys.readouterr().err
    assert f"{path}:3" in err and "no_such_limit" in err
    assert "backends" not in err  # a preset is not asked for a gateway's sections


def test_the_state_section_is_validated_with_its_lines(tmp_path: Path) -> None:
    base = Path(__file__).resolve().parents[3] / "config.example.yaml"
    text = base.read_text() + (
        "state:\n  backend: redis\n  url: redis://user:secret@127.0.0.1:6379/0\n"
        "  on_failure: open\n"
    )
    path = tmp_path / "c.yaml"
    path.write_text(text)
    _loaded, issues = check_file(path)
    messages = [str(i) for i in issues]
    assert any("state.on_failure" in m for m in messages), messages
    assert all(i.line > 0 for i in issues)
