"""Noisy-neighbour benchmark: a victim tenant's time-to-first-token beside a flooding tenant.

See ``python -m bench.noisy_neighbour --help`` and docs/performance.md.
"""
