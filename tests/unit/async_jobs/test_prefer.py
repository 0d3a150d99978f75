"""``Prefer`` (RFC 7240) parsed by its grammar, not searched for a substring."""

from __future__ import annotations

import pytest

from gateway.front.prefer import Preference, preferences, prefers_async


@pytest.mark.parametrize(
    "lines",
    [
        ["respond-async"],
        ["Respond-Async"],
        ["wait=10, respond-async"],
        ["return=minimal", "respond-async; foo=bar"],
        ['handling=lenient, respond-async ; x="a, b"'],
        [" ,respond-async,"],
    ],
)
def test_respond_async_is_found(lines: list[str]) -> None:
    raw = [(b"prefer", v.encode()) for v in lines]
    assert prefers_async(raw)


@pytest.mark.parametrize(
    "lines",
    [
        [],
        ["respond-asynchronously"],
        ['foo="respond-async"'],
        ['foo="x, respond-async"'],
        ["respond async"],
        ["wait=10"],
    ],
)
def test_respond_async_is_not_found(lines: list[str]) -> None:
    raw = [(b"prefer", v.encode()) for v in lines]
    assert not prefers_async(raw)


def test_only_prefer_headers_are_read() -> None:
    assert not prefers_async([(b"x-prefer", b"respond-async"), (b"accept", b"respond-async")])


def test_values_parameters_and_first_instance() -> None:
    prefs = preferences(['WAIT=10; a; B="q\\"x", wait=20', 'return = "minimal"'])
    assert prefs["wait"] == Preference("wait", "10", {"a": None, "b": 'q"x'})
    assert prefs["return"] == Preference("return", "minimal", {})


def test_a_malformed_preference_is_ignored_alone() -> None:
    prefs = preferences(['bad"name, x="unterminated, respond-async'])
    assert list(prefs) == ["respond-async"]
