"""Which decision core this process runs: the ``policies`` modules compiled with mypyc
(a regular ``pip install``; see setup.py) or plain Python (an editable install, no compiler,
or ``SLUICEGATE_COMPILE=0``). Reported at start and as ``sluicegate_build_info{core=...}``."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import pkgutil
from functools import cache
from typing import Literal

import policies

Core = Literal["compiled", "interpreted", "mixed"]


@cache  # a process's modules do not change; serve, demo and the metrics all ask
def compiled_modules() -> tuple[str, ...]:
    """The ``policies`` modules that import from a compiled extension (found, not imported),
    named relative to ``policies`` (``engine.scheduler``)."""
    suffixes = tuple(importlib.machinery.EXTENSION_SUFFIXES)
    found = []
    for mod in pkgutil.walk_packages(policies.__path__, "policies."):
        spec = importlib.util.find_spec(mod.name)
        if spec is not None and spec.origin is not None and spec.origin.endswith(suffixes):
            found.append(mod.name.removeprefix("policies."))
    return tuple(sorted(found))


def core() -> Core:
    """``compiled`` when the scheduler and its parts are compiled, ``interpreted`` when none
    is, ``mixed`` otherwise (a broken install: some compiled modules failed to land)."""
    compiled = compiled_modules()
    if not compiled:
        return "interpreted"
    return "compiled" if "engine.scheduler" in compiled and "types" in compiled else "mixed"
