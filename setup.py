"""The build: the decision core (``policies/``) compiled with mypyc, or plain Python.

Everything else about the package is in ``pyproject.toml``; this file only adds the compiled
modules. ``SLUICEGATE_COMPILE`` chooses:

- unset or ``auto`` (default): compile a regular install or wheel; fall back to plain Python,
  with a warning, when mypyc or a C compiler is missing or the compile fails.
- ``1``: compile or fail the build (the compiled test tier and the Docker image use this).
- ``0``: plain Python.

Editable installs (``pip install -e``) always stay plain Python, so a stale ``.so`` never
shadows an edit.

The running gateway says which core it loaded (a log line at start and
``sluicegate_build_info{core=...}``); ``policies.build.core()`` answers the same question.
See docs/performance.md ("The decision core compiled") for what it buys and why these modules.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from setuptools import setup
from setuptools.command.bdist_wheel import bdist_wheel
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent

NOT_COMPILED = frozenset(
    {
        "build.py",  # tells which core loaded: it must stay importable as Python
        "params.py",  # pydantic models: pydantic inspects validators as Python functions
        "registry.py",  # config parsing through pydantic, once per load
        "plugins.py",  # the table of built-in plugins, read once per load
        "policy_set.py",  # a dataclass of parameter models, built once per load
        "native/quick_init.py",  # builds __init__s with exec
        # installs methods on classes: a compiled function would not bind as one
        "native/read_only.py",
    }
)
"""Modules of ``policies/`` (paths relative to it) that stay Python; so do every package's
``__init__.py`` and every plugin's parameter model (``*_params.py``, pydantic as above)."""


def stays_python(relative: str) -> bool:
    """Whether ``policies/<relative>`` stays Python in a compiled build."""
    name = relative.rsplit("/", 1)[-1]
    return relative in NOT_COMPILED or name == "__init__.py" or name.endswith("_params.py")


def compiled_modules(root: Path = ROOT) -> list[str]:
    """The ``policies/`` modules mypyc compiles, as paths relative to ``root``."""
    policies = root / "policies"
    return sorted(
        f"policies/{rel}"
        for rel in (p.relative_to(policies).as_posix() for p in policies.rglob("*.py"))
        if not stays_python(rel)
    )


def _mode() -> str:
    mode = os.environ.get("SLUICEGATE_COMPILE", "auto").strip().lower() or "auto"
    if mode not in {"auto", "0", "1"}:
        sys.exit(f"SLUICEGATE_COMPILE={mode!r}: expected auto, 0 or 1")
    return mode


def _warn(message: str) -> None:
    print(f"sluicegate build: {message}", file=sys.stderr, flush=True)


class BuildCoreOrFallBack(build_ext):
    """``build_ext`` that, in ``auto`` mode, drops every compiled module when any of them
    fails to build: a compiled module without mypyc's shared runtime would not import, and
    half a compiled core is worse than none."""

    def run(self) -> None:
        if _mode() == "1":
            super().run()
            return
        try:
            super().run()
        except Exception as exc:  # any compiler failure means: plain Python
            self._fall_back(f"compiling the decision core failed ({exc})")
            return
        if not all(Path(self.get_ext_fullpath(e.name)).exists() for e in self.extensions):
            self._fall_back("some compiled modules did not build")

    def _fall_back(self, why: str) -> None:
        """Drop every compiled module that did build, and ship plain Python."""
        _warn(f"{why}; installing plain Python")
        for ext in self.extensions:
            Path(self.get_ext_fullpath(ext.name)).unlink(missing_ok=True)
        self.distribution.ext_modules = []

    def get_outputs(self) -> list[str]:
        return [o for o in super().get_outputs() if Path(o).exists()]


class WheelTaggedByWhatBuilt(bdist_wheel):
    """A wheel whose core fell back to plain Python is a pure wheel (``py3-none-any``, files
    in the wheel's root), as if it had never had extensions: the tag is settled after the
    build, not before it."""

    def run(self) -> None:
        if not self.skip_build:
            self.run_command("build")
        if not self.distribution.has_ext_modules():
            self.root_is_pure = True
        super().run()


def ext_modules() -> list[Any]:
    mode = _mode()
    if any(arg in {"editable_wheel", "develop"} for arg in sys.argv):
        if mode == "1":
            _warn("editable installs stay plain Python (SLUICEGATE_COMPILE=1 ignored)")
        return []
    builds = any(arg in {"bdist_wheel", "build", "build_ext", "install"} for arg in sys.argv)
    if mode == "0" or not builds:
        return []  # plain Python, or a metadata-only step (egg_info, dist_info, sdist)
    try:
        from mypyc.build import mypycify
    except ImportError:
        if mode == "1":
            raise
        _warn("mypyc is not available; installing plain Python")
        return []
    try:
        # The mypy options are pyproject's [tool.mypy] (strict); the build type-checks first.
        exts: list[Any] = mypycify(compiled_modules(), opt_level="3", group_name="policies_core")
    except BaseException as exc:  # mypyc exits through SystemExit on a type error
        if mode == "1" or isinstance(exc, KeyboardInterrupt):
            raise
        _warn(f"mypyc could not translate the decision core ({exc!r}); installing plain Python")
        return []
    for ext in exts:
        ext.optional = mode != "1"  # auto: a compiler error skips, BuildCoreOrFallBack cleans up
    return exts


if __name__ == "__main__":
    setup(
        ext_modules=ext_modules(),
        cmdclass={"build_ext": BuildCoreOrFallBack, "bdist_wheel": WheelTaggedByWhatBuilt},
    )
