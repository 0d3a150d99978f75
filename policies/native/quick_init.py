"""``quick_init``: a faster ``__init__`` for frozen, slotted dataclasses on the hot path.

A frozen dataclass's generated ``__init__`` stores every field through
``object.__setattr__(self, name, value)`` (it must get past the frozen ``__setattr__``),
which costs about three times what a plain class's init does. The values a decision makes
per request (``FlowKey``, ``WorkEstimate``, ``RequestInfo``, ...) pay that on every call.
(``Decision``, ``GateContext`` and ``Ticket`` went further: plain classes made read-only by
``policies/native/read_only.py``, which mypyc builds natively; a decorated class it does not.)
``quick_init`` replaces the generated ``__init__`` with one of the same signature
(same parameters, defaults and default factories) that stores each field through its slot
descriptor directly. Instances stay frozen; equality, hashing, ``repr``, ``replace`` and
pickling are the dataclass's own. Applied on top of ``@dataclass(frozen=True, slots=True)``;
a class with ``__post_init__``, ``InitVar``s, keyword-only or ``init=False`` fields is
refused (the generated ``__init__`` would do more than store fields).
"""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

T = TypeVar("T")

_FACTORY = object()  # the default of a parameter whose field has a default_factory


def quick_init(cls: type[T]) -> type[T]:
    params = getattr(cls, "__dataclass_params__", None)
    if params is None or not params.frozen or "__slots__" not in cls.__dict__:
        raise TypeError(f"{cls.__name__}: quick_init needs a frozen, slotted dataclass")
    if hasattr(cls, "__post_init__"):
        raise TypeError(f"{cls.__name__}: quick_init does not run __post_init__")
    fields = dataclasses.fields(cls)  # type: ignore[arg-type]
    if len(fields) != len(getattr(cls, "__dataclass_fields__", {})):
        raise TypeError(f"{cls.__name__}: quick_init does not handle InitVar/ClassVar fields")
    namespace: dict[str, Any] = {"_FACTORY": _FACTORY}
    args: list[str] = []
    body: list[str] = []
    for f in fields:
        if not f.init or f.kw_only:
            raise TypeError(f"{cls.__name__}.{f.name}: quick_init needs plain init fields")
        namespace[f"_set_{f.name}"] = cls.__dict__[f.name].__set__
        if f.default is not dataclasses.MISSING:
            namespace[f"_default_{f.name}"] = f.default
            args.append(f"{f.name}=_default_{f.name}")
        elif f.default_factory is not dataclasses.MISSING:
            namespace[f"_factory_{f.name}"] = f.default_factory
            args.append(f"{f.name}=_FACTORY")
            body.append(f"if {f.name} is _FACTORY: {f.name} = _factory_{f.name}()")
        else:
            args.append(f.name)
        body.append(f"_set_{f.name}(self, {f.name})")
    source = f"def __init__(self, {', '.join(args)}):\n" + "".join(f"    {b}\n" for b in body)
    exec(source, namespace)
    init = namespace["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__module__ = cls.__module__
    init.__wrapped__ = cls.__init__  # the generated one: signature() reports its annotations
    cls.__init__ = init  # type: ignore[method-assign]
    return cls
