"""``sluicegate epp`` without the ``epp`` extra: one line naming the extra, no traceback."""

from __future__ import annotations

import builtins
import sys
from typing import Any

import pytest

from commands import epp
from commands.cli import main


def _without_grpc(monkeypatch: pytest.MonkeyPatch) -> None:
    real_import = builtins.__import__

    def fake_import(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "grpc" or name.startswith("grpc."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return real_import(name, *args, **kwargs)

    for module in [m for m in sys.modules if m == "grpc" or m.startswith("gateway.epp")]:
        monkeypatch.delitem(sys.modules, module)
    monkeypatch.setattr(builtins, "__import__", fake_import)


def test_sluicegate_epp_without_the_extra_says_which_extra_to_install(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    _without_grpc(monkeypatch)
    with pytest.raises(SystemExit) as ended:
        main(["epp", "--config", str(tmp_path / "unused.yaml")])
    message = str(ended.value.code)
    assert "\n" not in message
    assert "grpc" in message and "pip install 'sluicegate[epp]'" in message


def test_another_missing_module_is_not_blamed_on_the_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real_import = builtins.__import__

    def fake_import(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "gateway.epp.server":
            raise ModuleNotFoundError("No module named 'somewhere_else'", name="somewhere_else")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", fake_import)
    with pytest.raises(ModuleNotFoundError):
        epp.picker()
