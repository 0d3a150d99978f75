"""Parameters of ``fixed.py``, apart from it for mypyc (see ``policies/params.py``)."""

from __future__ import annotations

from pydantic import ConfigDict, Field

from policies.params import Params


class FixedParams(Params):
    model_config = ConfigDict(json_schema_extra={"examples": [{"max_in_flight": 2}, {}]})
    max_in_flight: int | None = Field(default=None, gt=0)
    """The cap per backend. Unset: the engine's own slots, as measured (``fixed.py``)."""
