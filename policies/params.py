"""The base of every policy parameter model. Each plugin's own model lives beside it,
in ``<plugin>_params.py``: pydantic inspects validators as plain Python functions, which
a module compiled by mypyc does not have, so parameter models stay out of compiled modules
(``setup.py`` compiles everything else; ``tests/unit/policies/test_params_apart.py``)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Params(BaseModel):
    """Base of every policy parameter model: unknown keys are config errors."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    def tenant_references(self) -> list[tuple[tuple[str | int, ...], str]]:
        """Every tenant these parameters name, with its location in them: the gateway's
        config check requires each to be a configured tenant. None by default."""
        return []


class NoParams(Params):
    pass
