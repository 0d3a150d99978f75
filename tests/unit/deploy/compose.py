"""Docker Compose files as ``docker compose config`` would see them, without Docker.

* ``read_env_file``: the ``.env`` format (``KEY=VALUE`` lines, ``#`` comments, optional quotes).
* ``interpolate``: Compose's variable syntax in every string value: ``${VAR}``, ``$VAR``,
  ``${VAR:-default}``, ``${VAR-default}``, ``${VAR:?error}``, ``${VAR?error}``, ``$$``. An
  unset variable without a default is an error here (Compose would warn and use "").
* ``compose_schema``: the Compose Specification's JSON schema as vendored by check-jsonschema
  (``check-jsonschema --builtin-schema vendor.compose-spec``), read offline.
"""

from __future__ import annotations

import json
import re
from importlib import resources
from pathlib import Path
from typing import Any

_VAR = re.compile(
    r"\$(?:(?P<escaped>\$)|\{(?P<braced>[A-Za-z_][A-Za-z0-9_]*)(?P<op>:?[-?])?(?P<arg>[^}]*)\}"
    r"|(?P<plain>[A-Za-z_][A-Za-z0-9_]*))"
)


class UnsetVariable(KeyError):
    pass


def read_env_file(path: Path) -> dict[str, str]:
    out = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, _, value = line.partition("=")
        out[key.strip()] = value.strip().strip("'\"")
    return out


def _substitute(text: str, env: dict[str, str]) -> str:
    def one(found: re.Match[str]) -> str:
        if found.group("escaped"):
            return "$"
        name = found.group("braced") or found.group("plain")
        op, arg = found.group("op"), found.group("arg") or ""
        value = env.get(name)
        missing = value is None or (value == "" and op is not None and op.startswith(":"))
        if not missing:
            return str(value)
        if op in (":-", "-"):
            return arg
        raise UnsetVariable(f"${{{name}}} is not set{': ' + arg if arg else ''}")

    return _VAR.sub(one, text)


def interpolate(node: Any, env: dict[str, str]) -> Any:
    """Every string in ``node`` (keys too) with Compose's variables substituted."""
    if isinstance(node, str):
        return _substitute(node, env)
    if isinstance(node, list):
        return [interpolate(item, env) for item in node]
    if isinstance(node, dict):
        return {interpolate(k, env): interpolate(v, env) for k, v in node.items()}
    return node


def variables(node: Any) -> set[str]:
    """The variable names ``node`` refers to."""
    text = json.dumps(node)
    return {m.group("braced") or m.group("plain") for m in _VAR.finditer(text)} - {None}


def compose_schema() -> dict[str, Any]:
    vendored = resources.files("check_jsonschema.builtin_schemas.vendor")
    schema: dict[str, Any] = json.loads((vendored / "compose-spec.json").read_text())
    return schema


def flag_values(command: list[str]) -> dict[str, str]:
    """``--name=value`` arguments as ``{name: value}``."""
    out = {}
    for arg in command:
        if arg.startswith("--") and "=" in arg:
            name, _, value = arg[2:].partition("=")
            out[name] = value
    return out
