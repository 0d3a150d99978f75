"""When a structure that drops dead queue entries lazily must rebuild itself.

The queue book and every fairness policy remove a leaving entry in O(1) by marking it dead
and dropping it when it reaches the front. A front that never moves (a tenant that stays
backlogged, an old request that never dispatches) would keep every dead entry behind it, so
each structure is rebuilt from its live entries once the dead outnumber the live by more
than ``SLACK``: memory stays below twice the live entries plus the slack, and a rebuild costs
less than twice the removals since the last one.
"""

from __future__ import annotations

SLACK = 64
"""Dead entries a structure may hold beyond its live ones before it is rebuilt."""


def must_rebuild(held: int, live: int) -> bool:
    """Whether a structure holding ``held`` entries, ``live`` of them live, must be rebuilt."""
    return held > 2 * live + SLACK
