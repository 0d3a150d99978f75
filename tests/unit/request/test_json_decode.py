"""``loads_as_json`` gives what ``json.loads`` gives: the same value (types, key order,
big integers, NaN, lone surrogates) or the same refusal, for any body."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.request.errors import ApiError
from gateway.request.inbound import _DEEP, _loads_stdlib, loads_as_json


def _outcome(decode: Any, raw: bytes) -> tuple[Any, ...]:
    try:
        value = decode(raw)
    except ApiError as err:
        return ("refused", err.status, err.message)
    except RecursionError:
        return ("too deep",)
    return ("value", repr(value))  # repr: types (1 vs 1.0 vs True) and key order count


def _same(raw: bytes) -> None:
    assert _outcome(loads_as_json, raw) == _outcome(_loads_stdlib, raw), raw[:200]


_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text()
    | st.sampled_from([2**63, 2**64, -(2**63) - 1, 10**30, 1e308, 5e-324, -0.0])
)
_values = st.recursive(
    _scalars, lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(), c, max_size=4)
)


@settings(max_examples=400, deadline=None)
@given(_values, st.booleans(), st.sampled_from([None, 0, 2]))
def test_any_json_document_decodes_as_json_loads_does(
    value: Any, ascii_only: bool, indent: int | None
) -> None:
    _same(
        json.dumps(value, ensure_ascii=ascii_only, indent=indent).encode("utf-8", "surrogatepass")
    )


_JSONISH = st.text(alphabet='{}[]":, 0123456789.eE+-truefalsnNaIiy\\u\n\t\ufeff\x01é', max_size=40)


@settings(max_examples=600, deadline=None)
@given(_JSONISH)
def test_near_json_text_is_accepted_or_refused_as_json_loads_does(text: str) -> None:
    _same(text.encode("utf-8"))


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=40))
def test_any_bytes_are_accepted_or_refused_as_json_loads_does(raw: bytes) -> None:
    _same(raw)


def test_known_disagreements_of_orjson_take_json() -> None:
    known = [
        b'{"seed": 123456789012345678901234567890}',
        b'{"n": 18446744073709551616}',
        b'{"x": NaN, "y": -Infinity}',
        b'{"s": "\\ud800"}',
        b"\xef\xbb\xbf{}",
        b'{"big": 1e400}',
        b'{"a": 1, "a": 2, "b": 3}',
        b"[1,]",
        b'{"a":"\x01"}',
    ]
    for raw in known:
        _same(raw)


def test_nesting_deeper_than_json_can_read_is_refused_as_before() -> None:
    for depth in (_DEEP - 1, _DEEP, 999, 1000, 1024, 1030):
        _same(b'{"a":' + b"[" * depth + b"]" * depth + b"}")
