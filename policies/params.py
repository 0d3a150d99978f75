"""The base of every policy parameter model. Each plugin's own model lives beside it,
in ``<plugin>_params.py``: pydantic inspects validators as plain Python functions, which
a module compiled by mypyc does not have, so parameter models stay out of compiled modules
(``setup.py`` compiles everything else; ``tests/unit/policies/test_params_apart.py``)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Params(BaseModel):
    """Base of every policy parameter model: unknown keys are config errors.

    A model whose defaults do not exercise its policy names a valid ``parameters:`` mapping
    that does, as a JSON-schema example (``model_config = ConfigDict(json_schema_extra=
    {"examples": [...]})``): the conformance suite runs every registered plugin with it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    @classmethod
    def example(cls) -> dict[str, object]:
        """The first JSON-schema example, or ``{}`` (the defaults)."""
        extra = cls.model_config.get("json_schema_extra")
        examples = extra.get("examples") if isinstance(extra, dict) else None
        first = examples[0] if isinstance(examples, list) and examples else {}
        return dict(first) if isinstance(first, dict) else {}


class NoParams(Params):
    pass
