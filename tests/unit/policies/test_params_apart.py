"""The pydantic parameter models stay in ``policies/params.py``, apart from the decision code.

mypyc cannot compile a module whose pydantic validators or ``Field`` defaults it would
have to turn into native code (the build, ``setup.py``, compiles every other module of
``policies/``); this keeps a model from drifting back next to the code that decides.
"""

from __future__ import annotations

import ast
import runpy
from pathlib import Path

from policies.registry import Role, registered

REPO = Path(__file__).resolve().parents[3]
POLICIES = REPO / "policies"
SETUP = runpy.run_path(str(REPO / "setup.py"), run_name="setup")  # not __main__: no setup()
NOT_COMPILED: frozenset[str] = SETUP["NOT_COMPILED"]
compiled_modules = SETUP["compiled_modules"]


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module.split(".")[0])
        elif isinstance(node, ast.Import):
            found.update(a.name.split(".")[0] for a in node.names)
    return found


def test_no_decision_module_imports_pydantic() -> None:
    modules = compiled_modules(REPO)
    assert "policies/scheduler.py" in modules and "policies/params.py" not in modules
    offenders = [m for m in modules if "pydantic" in _imports(POLICIES.parent / m)]
    assert offenders == [], f"pydantic models belong in policies/params.py: {offenders}"


def test_every_registered_policy_reads_its_parameters_from_params() -> None:
    roles: tuple[Role, ...] = ("limit", "fairness", "discipline", "gate")
    models = {cls.params_model for role in roles for cls in registered(role).values()}
    assert models, "no registered policies"
    assert {m.__module__ for m in models} == {"policies.params"}


def test_the_uncompiled_set_names_existing_modules() -> None:
    assert {p.name for p in POLICIES.glob("*.py")} >= NOT_COMPILED
