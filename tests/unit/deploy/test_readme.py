"""The README's operator reference says what the code does: every config field with its
default, and only headers and reasons the gateway really reads or sends."""

from __future__ import annotations

import re
from typing import Any

import pytest
from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from gateway.config.schema import GatewayConfig
from policies.types import Reason
from tests.unit.deploy.conftest import REPO

GATEWAY_SOURCE = "\n".join(p.read_text() for p in sorted((REPO / "gateway").rglob("*.py")))
_ROW = re.compile(r"^\|\s*`(?P<name>[^`]+)`\s*\|\s*(?P<second>[^|]*)\|")


def _section(title: str) -> str:
    text = (REPO / "README.md").read_text()
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def _config_tables() -> dict[str, dict[str, str]]:
    """Per config section (``""`` = top level), field -> the row's default cell."""
    tables: dict[str, dict[str, str]] = {}
    current = None
    for line in _section("Configuration reference").splitlines():
        heading = re.match(r"^`(\w+):`", line)
        if heading or line.startswith("Top level:"):
            current = heading.group(1) if heading else ""
            tables[current] = {}
        elif current is not None and (row := _ROW.match(line)):
            tables[current][row.group("name")] = row.group("second").strip()
    return tables


def _yaml_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "[" + ", ".join(str(v) for v in value) + "]"
    return str(value)


def _sections() -> list[tuple[str, type[BaseModel]]]:
    out: list[tuple[str, type[BaseModel]]] = [("", GatewayConfig)]
    for name, field in GatewayConfig.model_fields.items():
        inner = field.annotation
        args = getattr(inner, "__args__", ())
        model = next(
            (a for a in (inner, *args) if isinstance(a, type) and issubclass(a, BaseModel)), None
        )
        if model is not None:
            out.append((name, model))
    return out


@pytest.mark.parametrize(("section", "model"), _sections(), ids=lambda v: str(v) or "top")
def test_every_config_field_is_documented_with_its_default(
    section: str, model: type[BaseModel]
) -> None:
    tables = _config_tables()
    assert section in tables, f"no table for `{section}:`"
    documented = tables[section]
    for name, field in model.model_fields.items():
        if section == "" and name in {s for s, _ in _sections()} | {"policy"}:
            continue  # sections have their own tables; policy points to docs/policies.md
        assert name in documented, f"`{section}.{name}` is not in the README"
        default = field.get_default(call_default_factory=True)
        cell = documented[name]
        if field.default is PydanticUndefined and field.default_factory is None:
            assert cell == "required", f"`{section}.{name}` is required"
        elif default is not None and default != []:
            assert f"`{_yaml_text(default)}`" in cell, f"`{section}.{name}` default {default!r}"


def test_the_policy_section_points_to_its_reference() -> None:
    assert "docs/policies.md" in _section("Configuration reference")


def test_every_documented_header_is_read_or_sent_by_the_gateway() -> None:
    first_cells = [
        line.split("|")[1] for line in _section("Headers").splitlines() if line.startswith("| `")
    ]
    headers = [
        name
        for cell in first_cells
        for name in re.findall(r"`([^`]+)`", cell)
        if name.lower().startswith(("x-", "retry-after", "authorization"))
    ]
    assert len(headers) == 23, headers
    for header in headers:
        name = header.split(":")[0].strip().lower()
        in_code = f'"{name}"' in GATEWAY_SOURCE.lower()
        assert in_code, f"{name} is not in gateway/"


def test_every_documented_reason_exists() -> None:
    reasons = {r.value for r in Reason}
    row = next(
        line
        for line in _section("Headers").splitlines()
        if line.startswith("| `x-sluicegate-reason`")
    )
    listed = set(re.findall(r"`([a-z_]+)`", row)) - {"x-sluicegate-reason"}
    assert reasons <= listed, f"undocumented reasons: {reasons - listed}"
    for gateway_reason in listed - reasons:
        in_code = f'"{gateway_reason}"' in GATEWAY_SOURCE
        assert in_code, f"{gateway_reason} is neither a Reason nor in gateway/"
