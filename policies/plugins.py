"""The built-in plugins, by role: the one table from YAML ``type`` names to classes.

Adding a policy is one module (its class, with ``type_name`` and ``params_model``; the
model, with an example when its defaults do not exercise the policy, in ``<name>_params.py``
beside it), one line here, and one section in ``docs/policies.md``; the
conformance suite and the docs check find it from this table. Plugins never import the
registry, so this table and ``policies.registry`` form no cycle.
"""

from __future__ import annotations

from typing import Any, Literal

from policies.contracts import Plugin
from policies.disciplines.codel import Codel
from policies.disciplines.deadline import DeadlineOnly
from policies.fairness.fifo import Fifo
from policies.fairness.priority import PriorityBands
from policies.fairness.vtc import Vtc
from policies.gates.codel_admission import CodelAdmission
from policies.gates.deadline import DeadlineFeasibility
from policies.gates.quota import TenantQuota
from policies.gates.reservation import WaitReservation
from policies.gates.retry_budget import RetryBudget
from policies.limits.adaptive import AdaptiveLimit
from policies.limits.fixed import FixedCap
from policies.limits.server_signals import ServerSignals

Role = Literal["limit", "fairness", "discipline", "gate"]

BUILTIN: dict[Role, tuple[type[Plugin[Any, Any]], ...]] = {
    "limit": (ServerSignals, FixedCap, AdaptiveLimit),
    "fairness": (Vtc, Fifo, PriorityBands),
    "discipline": (DeadlineOnly, Codel),
    "gate": (TenantQuota, RetryBudget, DeadlineFeasibility, WaitReservation, CodelAdmission),
}
