"""The ``Prefer`` request header (RFC 7240), parsed by its grammar:

    Prefer     = 1#preference
    preference = token [ BWS "=" BWS word ] *( OWS ";" [ OWS parameter ] )
    parameter  = token [ BWS "=" BWS word ]
    word       = token / quoted-string

Preferences are comma-separated (a comma inside a quoted string does not split), several
``Prefer`` header lines form one list, names are compared case-insensitively, and only the
first instance of a preference counts. A malformed preference is ignored, as the RFC lets
a server ignore any preference; it never fails the request.
"""

from __future__ import annotations

import string
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

RESPOND_ASYNC = "respond-async"
_TCHAR = frozenset("!#$%&'*+-.^_`|~" + string.ascii_letters + string.digits)


@dataclass(frozen=True)
class Preference:
    name: str
    """Lowercase."""
    value: str | None = None
    params: dict[str, str | None] = field(default_factory=dict)


def preferences(values: Iterable[str]) -> dict[str, Preference]:
    """Every well-formed preference of the header lines ``values``, first instance wins."""
    out: dict[str, Preference] = {}
    for value in values:
        for element in _split(value, ","):
            pref = _preference(element)
            if pref is not None and pref.name not in out:
                out[pref.name] = pref
    return out


def prefers_async(raw_headers: Iterable[tuple[bytes, bytes]]) -> bool:
    """The request's headers (ASGI's raw list) ask for ``respond-async``."""
    lines = [v for k, v in raw_headers if k.lower() == b"prefer"]
    if not any(b"respond-async" in v.lower() for v in lines):
        return False  # not named at all: nothing to parse
    return RESPOND_ASYNC in preferences(v.decode("latin-1") for v in lines)


def _preference(element: str) -> Preference | None:
    parts = list(_split(element, ";"))
    if not parts:
        return None
    head = _pair(parts[0])
    if head is None:
        return None
    params: dict[str, str | None] = {}
    for part in parts[1:]:
        if not part.strip():
            continue  # "*( OWS ";" [ OWS parameter ] )": an empty parameter is allowed
        pair = _pair(part)
        if pair is None:
            return None
        params.setdefault(pair[0], pair[1])
    return Preference(head[0], head[1], params)


def _pair(text: str) -> tuple[str, str | None] | None:
    """``token [ BWS "=" BWS word ]`` -> (lowercase token, word or None); None if malformed."""
    name, eq, word = text.partition("=")
    name = name.strip(" \t")
    if not name or not _TCHAR.issuperset(name):
        return None
    if not eq:
        return name.lower(), None
    value = _word(word.strip(" \t"))
    return (name.lower(), value) if value is not None else None


def _word(text: str) -> str | None:
    if text.startswith('"'):
        return _quoted(text)
    if text == "":
        return ""  # "empty or absent values are equivalent" (RFC 7240, section 2)
    return text if _TCHAR.issuperset(text) else None


def _quoted(text: str) -> str | None:
    """A quoted-string's content, escapes undone; None unless it is exactly one."""
    out: list[str] = []
    i = 1
    while i < len(text):
        c = text[i]
        if c == "\\" and i + 1 < len(text):
            out.append(text[i + 1])
            i += 2
            continue
        if c == '"':
            return "".join(out) if i == len(text) - 1 else None
        out.append(c)
        i += 1
    return None


def _split(text: str, sep: str) -> Iterator[str]:
    """``text`` split at ``sep`` outside quoted strings; empty list elements dropped
    (``#rule`` allows them)."""
    if '"' not in text:  # nothing quoted: a plain split says the same
        for part in text.split(sep):
            yield from _non_empty(part, sep)
        return
    start, quoted, escaped = 0, False, False
    for i, c in enumerate(text):
        if escaped:
            escaped = False
        elif quoted and c == "\\":
            escaped = True
        elif c == '"':
            quoted = not quoted
        elif c == sep and not quoted:
            yield from _non_empty(text[start:i], sep)
            start = i + 1
    yield from _non_empty(text[start:], sep)


def _non_empty(part: str, sep: str) -> Iterator[str]:
    if sep == ";" or part.strip(" \t"):
        yield part
