"""Parameters of ``codel_admission.py``, apart from it for mypyc (see ``policies/params.py``)."""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict

from policies.disciplines.codel_params import CodelParams


class CodelAdmissionParams(CodelParams):
    """``target_s`` and ``interval_s`` in seconds, as for the ``codel`` discipline."""

    model_config = ConfigDict(
        json_schema_extra={"examples": [{"target_s": 0.5, "interval_s": 3.0}]}
    )
    shed: Literal["control_law", "while_dropping"] = "control_law"
