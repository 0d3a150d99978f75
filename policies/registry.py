"""From the YAML ``policy:`` section to a built ``PolicySet``.

A registry maps ``type`` names to classes per role; each class owns its pydantic parameter
model (``extra="forbid"``). ``build_policy`` reports every error at once, each located by a
path relative to the ``policy:`` section, so the gateway can map it to a file line.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import types
import typing
from collections.abc import Callable, Collection, Mapping
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from policies.contracts import Discipline, Fairness, Gate, Limit, NamedGate, Plugin
from policies.engine.cache_params import CacheParams
from policies.engine.headroom_params import HeadroomParams
from policies.engine.prefill_backlog_params import PrefillBacklogParams
from policies.engine.queue_params import QueueParams
from policies.engine.retry_after_params import RetryAfterParams
from policies.ladder.ladder_params import LadderParams
from policies.params import Params
from policies.plugins import BUILTIN, Role
from policies.policy_set import PolicySet
from policies.runs.runs_params import RunsParams

Loc = tuple[str | int, ...]
_ROLE_BASE: dict[Role, type] = {
    "limit": Limit,
    "fairness": Fairness,
    "discipline": Discipline,
    "gate": Gate,
}
_REGISTRY: dict[Role, dict[str, type[Plugin[Any, Any]]]] = {
    role: {cls.type_name: cls for cls in classes} for role, classes in BUILTIN.items()
}
DEFAULTS: dict[Role, str] = {
    "limit": "server_signals",
    "fairness": "vtc",
    "discipline": "deadline",
}

T = TypeVar("T", bound=type[Plugin[Any, Any]])


class PolicyConfigError(Exception):
    """All errors of one ``policy:`` section: (location, message) pairs."""

    def __init__(self, errors: list[tuple[Loc, str]]) -> None:
        self.errors = errors
        super().__init__(
            "; ".join(f"{'.'.join(map(str, loc)) or '<policy>'}: {m}" for loc, m in errors)
        )


def register(role: Role) -> Callable[[T], T]:
    """Add a plugin of the user's own under its ``type_name`` (a class decorator)."""

    def add(cls: T) -> T:
        # the MRO, not issubclass: with the compiled core, the ABC's subclass check answers
        # True for an interpreted subclass of any compiled plugin base
        if _ROLE_BASE[role] not in cls.__mro__:
            raise TypeError(f"{cls.__name__} is not a {role}")
        _REGISTRY[role][cls.type_name] = cls
        return cls

    return add


def registered(role: Role) -> Mapping[str, type[Plugin[Any, Any]]]:
    return dict(_REGISTRY[role])


SECTION_KEYS = {
    "name",
    "limit",
    "fairness",
    "queue",
    "gates",
    "ladder",
    "retry_after",
    "headroom",
    "prefill_backlog",
    "runs",
    "cache",
}


def build_policy(raw: Mapping[str, Any] | None) -> PolicySet:
    """Validate and build ``raw`` (the ``policy:`` mapping; None or {} = defaults)."""
    raw = {} if raw is None else raw
    errors: list[tuple[Loc, str]] = []
    if not isinstance(raw, Mapping):
        raise PolicyConfigError([((), "policy must be a mapping")])
    errors += [((k,), unknown_key(k, SECTION_KEYS)) for k in raw if k not in SECTION_KEYS]
    name = raw.get("name", "default")
    if not isinstance(name, str) or not name:
        errors.append((("name",), "must be a non-empty string"))
    queue_raw = dict(_mapping(raw.get("queue"), ("queue",), errors))
    discipline_raw = queue_raw.pop("discipline", None)
    queue = _model(QueueParams, queue_raw, ("queue",), errors)
    limit = _plugin("limit", raw.get("limit"), ("limit",), errors)
    fairness = _plugin("fairness", raw.get("fairness"), ("fairness",), errors)
    discipline = _plugin("discipline", discipline_raw, ("queue", "discipline"), errors)
    gates = _gates(raw.get("gates"), errors)
    ladder = _model(LadderParams, raw.get("ladder"), ("ladder",), errors)
    retry = _model(RetryAfterParams, raw.get("retry_after"), ("retry_after",), errors)
    headroom = _model(HeadroomParams, raw.get("headroom"), ("headroom",), errors)
    prefill = _model(PrefillBacklogParams, raw.get("prefill_backlog"), ("prefill_backlog",), errors)
    runs = _model(RunsParams, raw.get("runs"), ("runs",), errors)
    cache = _model(CacheParams, raw.get("cache"), ("cache",), errors)
    if errors:
        raise PolicyConfigError(errors)
    assert isinstance(limit, Limit) and isinstance(fairness, Fairness)
    assert isinstance(discipline, Discipline) and queue and ladder and retry and headroom
    assert prefill and runs and cache
    return PolicySet(
        str(name),
        policy_version(raw),
        limit,
        fairness,
        discipline,
        gates,
        queue,
        ladder,
        retry,
        headroom,
        prefill,
        runs,
        cache,
    )


def _mapping(value: Any, loc: Loc, errors: list[tuple[Loc, str]]) -> Mapping[Any, Any]:
    """``value`` when it is a mapping (None: empty); else an error at ``loc`` and empty."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        errors.append((loc, "must be a mapping"))
        return {}
    return value


def policy_version(raw: Mapping[str, Any]) -> str:
    """A short hash of the section's canonical JSON: the ``policy_version`` in decisions."""
    canon = json.dumps(raw, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(canon.encode()).hexdigest()[:12]


M = TypeVar("M", bound=BaseModel)


def _model(cls: type[M], raw: Any, loc: Loc, errors: list[tuple[Loc, str]]) -> M | None:
    try:
        return cls.model_validate(raw if raw is not None else {})
    except ValidationError as exc:
        for e in exc.errors():
            errors.append(((*loc, *e["loc"]), error_message(cls, e)))
        return None


def error_message(model: type[BaseModel], error: ErrorDetails) -> str:
    """A pydantic error's message for an operator: an unknown key with a did-you-mean,
    a validator's own message without pydantic's "Value error, " prefix."""
    if error["type"] == "extra_forbidden" and error["loc"]:
        return unknown_key(str(error["loc"][-1]), keys_at(model, tuple(error["loc"][:-1])))
    if error["type"] == "value_error" and "error" in error.get("ctx", {}):
        return str(error["ctx"]["error"])
    return error["msg"]


def unknown_key(key: str, known: Collection[str]) -> str:
    return f"unknown key {key!r}{did_you_mean(key, known)}"


def did_you_mean(word: str, known: Collection[str]) -> str:
    """``; did you mean 'x'?`` for the closest of ``known`` (difflib), else the list."""
    options = sorted(set(known))
    close = difflib.get_close_matches(word, options, n=1)
    if close:
        return f"; did you mean {close[0]!r}?"
    return f" (known: {', '.join(options)})" if options else ""


def keys_at(model: type[BaseModel], loc: Loc) -> list[str]:
    """The field names of the model found at ``loc`` inside ``model`` (a path of field
    names, list indexes and dict keys); [] when no model is there."""
    tp: Any = model
    for part in loc:
        tp = _step(_unwrap(tp), part)
    tp = _unwrap(tp)
    return list(tp.model_fields) if isinstance(tp, type) and issubclass(tp, BaseModel) else []


def _step(tp: Any, part: str | int) -> Any:
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        field = tp.model_fields.get(str(part))
        return None if field is None else field.annotation
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (list, tuple, set, frozenset) and args:
        return args[0]
    if origin is dict and len(args) == 2:
        return args[1]
    return None


def _unwrap(tp: Any) -> Any:
    """``X | None`` -> ``X``; anything else as it is."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return args[0] if len(args) == 1 else tp
    return tp


def _plugin(
    role: Role,
    raw: Any,
    loc: Loc,
    errors: list[tuple[Loc, str]],
    *,
    extra: frozenset[str] = frozenset(),
) -> Plugin[Any, Any] | None:
    spec = {"type": DEFAULTS[role]} if raw is None else raw
    if not isinstance(spec, Mapping):
        errors.append((loc, "must be a mapping with 'type' and optional 'parameters'"))
        return None
    allowed = {"type", "parameters"} | extra
    errors += [((*loc, k), unknown_key(str(k), allowed)) for k in spec if k not in allowed]
    type_name = spec.get("type", DEFAULTS.get(role))
    cls = _REGISTRY[role].get(type_name) if isinstance(type_name, str) else None
    if cls is None:
        known = sorted(_REGISTRY[role])
        hint = did_you_mean(str(type_name), known)
        if hint.startswith(";"):
            hint += f" (known: {', '.join(known)})"
        errors.append(((*loc, "type"), f"unknown {role} type {type_name!r}{hint}"))
        return None
    params = _model(cls.params_model, spec.get("parameters"), (*loc, "parameters"), errors)
    return None if params is None else cls(params)


def tenant_references(raw: Any) -> list[tuple[Loc, str]]:
    """Every tenant the section's plugin parameters name (e.g. a per-tenant quota), located
    relative to the ``policy:`` section; parts that do not validate are skipped (their
    errors are ``build_policy``'s)."""
    if not isinstance(raw, Mapping):
        return []
    queue = raw.get("queue")
    gates: list[Any] = raw["gates"] if isinstance(raw.get("gates"), list) else []
    specs: list[tuple[Role, Loc, Any]] = [
        ("limit", ("limit",), raw.get("limit")),
        ("fairness", ("fairness",), raw.get("fairness")),
        (
            "discipline",
            ("queue", "discipline"),
            queue.get("discipline") if isinstance(queue, Mapping) else None,
        ),
        *(("gate", ("gates", i), g) for i, g in enumerate(gates)),
    ]
    out: list[tuple[Loc, str]] = []
    for role, loc, spec in specs:
        params = _params_of(role, spec)
        if params is not None:
            out += [((*loc, "parameters", *at), name) for at, name in params.tenant_references()]
    return out


def _params_of(role: Role, spec: Any) -> Params | None:
    if not isinstance(spec, Mapping):
        return None
    type_name = spec.get("type", DEFAULTS.get(role))
    cls = _REGISTRY[role].get(type_name) if isinstance(type_name, str) else None
    try:
        params = cls.params_model.model_validate(spec.get("parameters") or {}) if cls else None
    except ValidationError:
        return None
    return params if isinstance(params, Params) else None


def _gates(raw: Any, errors: list[tuple[Loc, str]]) -> tuple[NamedGate, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        errors.append((("gates",), "must be a list"))
        return ()
    built: list[NamedGate] = []
    names: set[str] = set()
    for i, spec in enumerate(raw):
        loc: Loc = ("gates", i)
        if not isinstance(spec, Mapping) or "type" not in spec:
            errors.append((loc, "each gate needs a 'type'"))
            continue
        gate = _plugin("gate", spec, loc, errors, extra=frozenset({"name", "shadow"}))
        name = spec.get("name", spec["type"])
        if not isinstance(name, str) or name in names:
            errors.append(((*loc, "name"), f"gate name {name!r} must be a unique string"))
        shadow = spec.get("shadow", False)
        if not isinstance(shadow, bool):
            errors.append(((*loc, "shadow"), "must be true or false"))
        if isinstance(gate, Gate) and isinstance(name, str) and name not in names:
            built.append(NamedGate(name, gate, shadow is True))
        names.add(str(name))
    return tuple(built)
