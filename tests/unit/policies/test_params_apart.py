"""The pydantic parameter models stay in ``*_params.py`` modules, apart from the decision code.

mypyc cannot compile a module whose pydantic validators or ``Field`` defaults it would
have to turn into native code (the build, ``setup.py``, compiles every other module of
``policies/``); this keeps a model from drifting back into the code that decides.
"""

from __future__ import annotations

import ast
import runpy
from pathlib import Path

from policies.plugins import Role
from policies.registry import registered

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
    assert "policies/engine/scheduler.py" in modules and "policies/params.py" not in modules
    offenders = [m for m in modules if "pydantic" in _imports(POLICIES.parent / m)]
    assert offenders == [], f"pydantic models belong in a *_params.py module: {offenders}"


def test_every_registered_policy_reads_its_parameters_from_a_params_module() -> None:
    roles: tuple[Role, ...] = ("limit", "fairness", "discipline", "gate")
    plugins = [cls for role in roles for cls in registered(role).values()]
    assert plugins, "no registered policies"
    for cls in plugins:
        module = cls.params_model.__module__
        assert module == "policies.params" or module.endswith("_params"), (cls, module)


def test_the_uncompiled_set_names_existing_modules() -> None:
    present = {p.relative_to(POLICIES).as_posix() for p in POLICIES.rglob("*.py")}
    assert present >= NOT_COMPILED
