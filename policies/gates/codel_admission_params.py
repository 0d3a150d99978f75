"""Parameters of ``codel_admission.py``, apart from it for mypyc (see ``policies/params.py``)."""

from __future__ import annotations

from typing import Literal

from policies.disciplines.codel_params import CodelParams


class CodelAdmissionParams(CodelParams):
    """``target_s`` and ``interval_s`` in seconds, as for the ``codel`` discipline."""

    shed: Literal["control_law", "while_dropping"] = "control_law"
