"""``ByFields``: the base of the read-only value classes (``policies/native/read_only.py``)
whose equality, hashing and ``repr`` go by their fields, in order, as a dataclass's do."""

from __future__ import annotations

from typing import ClassVar


class ByFields:
    """A subclass names its fields in ``FIELDS`` (the order of its parameters) and returns
    their values, in that order, from ``fields()``. Values of different classes are unequal."""

    __slots__ = ()
    FIELDS: ClassVar[tuple[str, ...]] = ()

    def fields(self) -> tuple[object, ...]:
        raise NotImplementedError

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ByFields) or type(other) is not type(self):
            return NotImplemented
        return self.fields() == other.fields()

    def __hash__(self) -> int:
        return hash(self.fields())

    def __repr__(self) -> str:
        pairs = ", ".join(f"{n}={v!r}" for n, v in zip(self.FIELDS, self.fields(), strict=True))
        return f"{type(self).__name__}({pairs})"
