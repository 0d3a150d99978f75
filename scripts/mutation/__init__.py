"""Mutation testing of the decision core: ``python3 scripts/mutate.py`` (docs/mutation.md)."""
