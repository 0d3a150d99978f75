"""A pytest plugin (``-p scripts.mutation.inject``) that imports one module with one mutant
applied, named by ``SLUICEGATE_MUTANT_MODULE`` (path) and ``SLUICEGATE_MUTANT_KEY``. The file
on disk is never touched, so runs in parallel and an interrupted run leave the tree intact."""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
from pathlib import Path
from types import CodeType, ModuleType

from scripts.mutation.operators import mutated_code

MODULE_ENV = "SLUICEGATE_MUTANT_MODULE"
KEY_ENV = "SLUICEGATE_MUTANT_KEY"


class _MutantLoader(importlib.abc.Loader):
    def __init__(self, code: CodeType) -> None:
        self.code = code

    def exec_module(self, module: ModuleType) -> None:
        exec(self.code, module.__dict__)


class _MutantFinder(importlib.abc.MetaPathFinder):
    def __init__(self, name: str, path: Path, code: CodeType) -> None:
        self.name, self.path, self.code = name, path, code

    def find_spec(
        self, fullname: str, path: object = None, target: object = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != self.name:
            return None
        return importlib.util.spec_from_file_location(
            fullname, self.path, loader=_MutantLoader(self.code)
        )


def module_name(relpath: str) -> str:
    return relpath.removesuffix(".py").replace("/", ".").removesuffix(".__init__")


def _install() -> None:
    relpath, key = os.environ.get(MODULE_ENV), os.environ.get(KEY_ENV)
    if not relpath or not key:
        return
    name = module_name(relpath)
    if name in sys.modules:
        raise RuntimeError(f"{name} was imported before the mutant could be installed")
    path = Path(relpath).resolve()
    code = mutated_code(relpath, path.read_text(), key)
    sys.meta_path.insert(0, _MutantFinder(name, path, code))


_install()
