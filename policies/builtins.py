"""Registers every built-in policy under its YAML ``type`` name."""

from __future__ import annotations

from policies.fair_fifo import Fifo
from policies.fair_priority import PriorityBands
from policies.fair_vtc import Vtc
from policies.gate_codel_admission import CodelAdmission
from policies.gate_deadline import DeadlineFeasibility
from policies.gate_quota import TenantQuota
from policies.gate_reservation import WaitReservation
from policies.gate_retry import RetryBudget
from policies.limit_adaptive import AdaptiveLimit
from policies.limit_fixed import FixedCap
from policies.limit_signals import ServerSignals
from policies.queue_codel import Codel
from policies.queue_deadline import DeadlineOnly
from policies.registry import register

for _limit in (ServerSignals, FixedCap, AdaptiveLimit):
    register("limit")(_limit)
for _fairness in (Vtc, Fifo, PriorityBands):
    register("fairness")(_fairness)
for _discipline in (DeadlineOnly, Codel):
    register("discipline")(_discipline)
for _gate in (TenantQuota, RetryBudget, DeadlineFeasibility, WaitReservation):
    register("gate")(_gate)
register("gate")(CodelAdmission)
