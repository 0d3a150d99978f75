"""Which plugin a gate is, asked from interpreted code about the decision core's classes.

With the compiled core (mypyc), ``isinstance(gate, RetryBudget)`` asked from interpreted code
answers True for an instance of any compiled ``Gate`` subclass: the ABC's instance check
misreads native instances, and caches the wrong answer, so ``issubclass`` is wrong after it
too. So the gateway reads the class's own MRO, which no ABC hook touches.
"""

from __future__ import annotations

from policies.contracts import Gate


def is_a(gate: object, kind: type[Gate]) -> bool:  # type: ignore[type-arg]
    """``gate`` is an instance of the plugin class ``kind`` (or of a subclass)."""
    return kind in type(gate).__mro__
