"""mutation.toml (module -> the unit tests that cover it, the slice, the threshold) and the
file of equivalent mutants it names (module, mutant key, one-line reason)."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Config:
    modules: dict[str, list[str]]  # module path -> test files, all relative to the root
    slice_modules: list[str]
    slice_every: int  # the slice keeps the mutants whose key hashes to 0 modulo this
    fail_under: float
    plugins: list[str]  # the pytest plugins the tests need (autoloading is off: it is slow)
    equivalents: dict[tuple[str, str], str]  # (module, key) -> reason
    equivalents_path: Path


def load(root: Path, name: str = "mutation.toml") -> Config:
    data = tomllib.loads((root / name).read_text())
    eq_path = root / data["equivalents"]
    slice_ = data.get("slice", {})
    return Config(
        modules={m: list(t) for m, t in data["modules"].items()},
        slice_modules=list(slice_.get("modules", [])),
        slice_every=int(slice_.get("every", 1)),
        fail_under=float(data.get("fail_under", 90.0)),
        plugins=[str(p) for p in data.get("pytest_plugins", [])],
        equivalents=_equivalents(eq_path),
        equivalents_path=eq_path,
    )


def _equivalents(path: Path) -> dict[tuple[str, str], str]:
    if not path.exists():
        return {}
    found: dict[tuple[str, str], str] = {}
    for item in tomllib.loads(path.read_text()).get("equivalent", []):
        reason = str(item.get("reason", "")).strip()
        if not reason:
            raise ValueError(f"{path}: equivalent mutant {item.get('mutant')!r} has no reason")
        found[(str(item["module"]), str(item["mutant"]))] = reason
    return found
