"""Value classes whose attributes cannot be assigned, compiled or not, built at native speed.

A class the decision builds on every request (``Decision``) is written as a plain class: its
``__init__`` stores each parameter in the attribute of the same name, annotated ``Final``.
Compiled by mypyc it is a native class whose constructor is C and whose ``Final`` attributes
are read-only (an assignment raises ``AttributeError``). A frozen dataclass would not be: a
native frozen dataclass is built through the interpreted ``__init__`` that ``dataclasses``
generates, and a decorated class is not native at all (callgrind: about a quarter of a
``submit``'s instructions went into building its values that way).

Interpreted, nothing would stop an assignment, so ``read_only(cls)``, called right after the
class, gives the plain-Python class the same refusal: it checks that ``__init__`` only stores
its parameters (it runs it once on probe values), then replaces it with one of the same
signature that stores through the slot descriptors, and makes ``__setattr__`` and
``__delattr__`` refuse. On a compiled class it does nothing: mypyc already refuses.
"""

from __future__ import annotations

import inspect
from typing import Any, NoReturn, TypeVar

T = TypeVar("T")


def is_native(cls: type) -> bool:
    """Whether mypyc compiled ``cls`` (a native class lists its attributes for pickling)."""
    return "__mypyc_attrs__" in cls.__dict__


def read_only(cls: type[T]) -> type[T]:
    if is_native(cls):
        return cls
    slots = cls.__dict__.get("__slots__")
    init = cls.__dict__.get("__init__")
    if not isinstance(slots, tuple) or init is None:
        raise TypeError(f"{cls.__name__}: read_only needs __slots__ and its own __init__")
    params = list(inspect.signature(init).parameters.values())[1:]
    names = [p.name for p in params]
    if sorted(names) != sorted(slots) or any(p.kind is not p.POSITIONAL_OR_KEYWORD for p in params):
        raise TypeError(f"{cls.__name__}: __init__'s parameters must be its slots, plainly")
    probe: Any = object.__new__(cls)
    values = [object() for _ in names]
    init(probe, *values)
    if any(getattr(probe, n, None) is not v for n, v in zip(names, values, strict=True)):
        raise TypeError(f"{cls.__name__}: __init__ must only store each parameter as is")
    namespace: dict[str, Any] = {}
    args = []
    for p in params:
        namespace[f"_set_{p.name}"] = cls.__dict__[p.name].__set__
        if p.default is p.empty:
            args.append(p.name)
        else:
            namespace[f"_default_{p.name}"] = p.default
            args.append(f"{p.name}=_default_{p.name}")
    body = "".join(f"    _set_{n}(self, {n})\n" for n in names)
    exec(f"def __init__(self, {', '.join(args)}):\n{body}", namespace)
    stores = namespace["__init__"]
    stores.__qualname__, stores.__module__ = init.__qualname__, init.__module__
    stores.__wrapped__ = init  # signature() reports the written one
    cls.__init__ = stores  # type: ignore[misc, method-assign]
    cls.__setattr__ = _refuse  # type: ignore[method-assign, assignment]
    cls.__delattr__ = _refuse  # type: ignore[method-assign, assignment]
    return cls


def _refuse(self: object, name: str, *value: object) -> NoReturn:
    raise AttributeError(f"attribute {name!r} of {type(self).__name__!r} objects is not writable")
