"""Config errors are all reported, each with its file line; check-config exits non-zero."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from commands.check_config import check_file, main
from gateway.config.schema import (
    ConfigError,
    ConfigIssue,
    GatewayConfig,
    load_config,
    load_config_bytes,
)

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


def test_version_is_a_hash_of_the_settings(tmp_path: Path) -> None:
    a, b, c = tmp_path / "a.yaml", tmp_path / "b.yaml", tmp_path / "c.yaml"
    a.write_text("backends: [{name: a, url: 'http://a', models: [m]}]\n")
    b.write_text("# comment\nbackends:\n  - {models: [m], url: 'http://a', name: a}\n")
    c.write_text("backends: [{name: a, url: 'http://a', models: [m]}]\nserver: {port: 1}\n")
    assert load_config(a).version == load_config(b).version
    assert load_config(a).version != load_config(c).version


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


EXAMPLE = Path(__file__).parents[3] / "config.example.yaml"
DIGEST = "5e884898da28047151d0e56f8dc6292773603d0d6aabbdd62a11ef721d1542d8"
CROSS = f"""\
auth:
  anonymous_tenant: ghost
default_workload_class: vip
tenants:
  - name: acme
    weight: -1
    api_key_sha256: [{DIGEST}]
  - name: acme
    api_key_sha256:
      - {DIGEST}
backends:
  - {{name: a, url: "http://a", models: [m]}}
"""


def _located(issues: list[ConfigIssue]) -> dict[str, tuple[int, str]]:
    return {".".join(map(str, i.loc)): (i.line, i.message) for i in issues}


def test_cross_field_errors_are_located_and_reported_with_field_errors(tmp_path: Path) -> None:
    path = tmp_path / "cross.yaml"
    path.write_text(CROSS)
    loaded, issues = check_file(path)
    assert loaded is None
    at = _located(issues)
    assert at["tenants.0.weight"][0] == 6  # a field error, reported alongside
    assert at["auth.anonymous_tenant"][0] == 2 and "ghost" in at["auth.anonymous_tenant"][1]
    assert at["default_workload_class"][0] == 3 and "vip" in at["default_workload_class"][1]
    assert at["tenants.1.name"][0] == 8 and "duplicate tenant" in at["tenants.1.name"][1]
    assert at["tenants.1.api_key_sha256.0"][0] == 10
    assert not any("Value error" in i.message for i in issues)
    assert [i.line for i in issues] == sorted(i.line for i in issues)


def test_a_bad_key_digest_is_located_at_the_digest(tmp_path: Path) -> None:
    path = tmp_path / "digest.yaml"
    path.write_text(f"""\
tenants:
  - name: acme
    api_key_sha256:
      - {DIGEST}
      - {DIGEST.upper()}
backends: [{{name: a, url: "http://a", models: [m]}}]
""")
    _, issues = check_file(path)
    assert [(i.line, ".".join(map(str, i.loc))) for i in issues] == [
        (5, "tenants.0.api_key_sha256.1")
    ]
    assert "64 lowercase hex" in issues[0].message and "Value error" not in issues[0].message


def test_a_yaml_syntax_error_names_the_file(tmp_path: Path, capsys) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text("backends:\n  - {name: a,\n")
    assert main([str(path)]) == 1
    err = capsys.readouterr().err
    first = err.splitlines()[0]
    assert first.startswith(f"{path}:3: not valid YAML: ")
    assert "<unicode string>" not in err


def test_a_missing_file_is_reported_plainly(tmp_path: Path, capsys) -> None:
    path = tmp_path / "nowhere.yaml"
    assert main([str(path)]) == 1
    assert (
        capsys.readouterr().err.splitlines()[0] == f"{path}: cannot read: No such file or directory"
    )
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value) == f"{path}: cannot read: No such file or directory"


def test_unknown_keys_and_types_get_a_suggestion(tmp_path: Path) -> None:
    path = tmp_path / "typo.yaml"
    path.write_text("""\
server: {prot: 8080}
tenants: [{name: acme, wieght: 2}]
backends: [{name: a, url: "http://a", models: [m]}]
policy:
  fairness: {type: vtcc}
  gates:
    - type: tenant_quota
      parameters: {default: {tokens_per_minut: 10}}
""")
    at = _located(check_file(path)[1])
    assert at["server.prot"] == (1, "unknown key 'prot'; did you mean 'port'?")
    assert at["tenants.0.wieght"] == (2, "unknown key 'wieght'; did you mean 'weight'?")
    assert "did you mean 'vtc'?" in at["policy.fairness.type"][1]
    key = "policy.gates.0.parameters.default.tokens_per_minut"
    assert at[key] == (8, "unknown key 'tokens_per_minut'; did you mean 'tokens_per_minute'?")


def test_a_quota_for_a_tenant_that_does_not_exist_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "quota.yaml"
    path.write_text("""\
tenants: [{name: acme}, {name: batchco}]
backends: [{name: a, url: "http://a", models: [m]}]
policy:
  gates:
    - type: tenant_quota
      parameters:
        tenants:
          acme: {tokens_per_minute: 1000}
          batchc0: {tokens_per_minute: 1000}
""")
    at = _located(check_file(path)[1])
    line, message = at["policy.gates.0.parameters.tenants.batchc0"]
    assert line == 9 and "did you mean 'batchco'?" in message
    assert list(at) == ["policy.gates.0.parameters.tenants.batchc0"]
    with pytest.raises(ValidationError, match="batchc0"):
        GatewayConfig.model_validate(yaml.safe_load(path.read_text()))


@pytest.mark.parametrize("preset", PRESETS, ids=lambda p: p.stem)
def test_every_preset_is_valid_in_the_example_config(preset: Path, tmp_path: Path) -> None:
    config = yaml.safe_load(EXAMPLE.read_text())
    config["policy"] = yaml.safe_load(preset.read_text())["policy"]
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    loaded, issues = check_file(path)
    assert issues == [] and loaded is not None


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
