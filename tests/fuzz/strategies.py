"""Hypothesis strategies for what a client and an operator control: the request body (as
bytes: valid requests with hostile values, any JSON, broken JSON, binary), the headers, the
path, and the config file (a valid one mutated, then sometimes broken as text)."""

from __future__ import annotations

import json
from typing import Any

import yaml
from hypothesis import strategies as st

from gateway.request.auth import key_digest

API_KEY = "sk-fuzz-acme"
OTHER_KEY = "sk-fuzz-beta"
CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"

ODD_STRINGS = ["", "\ud800", "a\udfff", "\x00", "\u2028", "tiny", "NaN", "1e309", "-0", "٣"]
BIG_INTS = [0, -1, 1, 2, 2**31, 2**63, 2**64 + 1, 10**30, -(10**30)]

text = st.one_of(st.text(max_size=8), st.sampled_from(ODD_STRINGS))
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-5, max_value=5000),
    st.sampled_from(BIG_INTS),
    st.floats(),  # NaN and infinities too: json.dumps writes them, json.loads reads them
    text,
)
json_values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(text, inner, max_size=4)),
    max_leaves=6,
)
counts = st.one_of(st.integers(min_value=-2, max_value=300), st.sampled_from(BIG_INTS), json_values)


def _maybe(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(strategy, json_values)


content_parts = st.lists(
    st.fixed_dictionaries({"type": _maybe(st.just("text")), "text": _maybe(text)}), max_size=3
)
message = st.one_of(
    st.fixed_dictionaries(
        {"role": _maybe(st.sampled_from(["user", "system", "assistant"]))},
        optional={"content": st.one_of(text, content_parts, json_values), "name": text},
    ),
    json_values,
)
messages = st.one_of(st.lists(message, min_size=1, max_size=4), json_values)
token_ids = st.lists(st.one_of(st.integers(-1, 5000), st.sampled_from(BIG_INTS)), max_size=6)
prompts = st.one_of(
    text,
    st.lists(text, max_size=6),
    token_ids,
    st.lists(token_ids, max_size=6),
    st.lists(st.one_of(text, token_ids), max_size=4),
    json_values,
)
stream_options = st.one_of(
    st.fixed_dictionaries(
        {}, optional={"include_usage": _maybe(st.booleans()), "continuous_usage_stats": scalars}
    ),
    json_values,
)
COMMON: dict[str, st.SearchStrategy[Any]] = {
    "stream": _maybe(st.booleans()),
    "stream_options": stream_options,
    "max_tokens": counts,
    "max_completion_tokens": counts,
    "n": counts,
    "best_of": counts,
    "temperature": scalars,
    "user": text,
}


def _request(prompt_key: str, prompt: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    required = {"model": _maybe(st.sampled_from(["tiny", "small", "gpt-9"]))}
    fields = st.fixed_dictionaries(required, optional={prompt_key: prompt, **COMMON})
    extra = st.dictionaries(text, json_values, max_size=2)
    return st.builds(lambda f, e: {**e, **f}, fields, extra)


def _dumps(value: Any) -> bytes:
    return json.dumps(value).encode("utf-8", "surrogatepass")


request_json = st.one_of(_request("messages", messages), _request("prompt", prompts))

words = st.one_of(
    st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), min_size=1, max_size=30),
    st.sampled_from(ODD_STRINGS),  # lone surrogates too: valid JSON, invalid Unicode
)
SANE: dict[str, st.SearchStrategy[Any]] = {
    "stream": st.booleans(),
    "stream_options": st.fixed_dictionaries({}, optional={"include_usage": st.booleans()}),
    "max_tokens": st.integers(1, 2100),
    "max_completion_tokens": st.integers(1, 2100),
    "n": st.integers(1, 70),
    "best_of": st.integers(1, 70),
    "temperature": st.floats(0, 2),
}
sane_messages = st.lists(
    st.fixed_dictionaries({"role": st.sampled_from(["user", "system"]), "content": words}),
    min_size=1,
    max_size=3,
)
sane_prompts = st.one_of(
    words,
    st.lists(words, min_size=1, max_size=5),
    st.lists(st.integers(0, 4000), min_size=1, max_size=8),
    st.lists(st.lists(st.integers(0, 4000), min_size=1, max_size=4), min_size=1, max_size=5),
)


def _sane(prompt_key: str, prompt: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    required = {"model": st.sampled_from(["tiny", "small"]), prompt_key: prompt}
    return st.fixed_dictionaries(required, optional=SANE)


def _one_hostile(request: dict[str, Any], key: str, value: Any) -> dict[str, Any]:
    return {**request, key: value}


sane_json = st.one_of(_sane("messages", sane_messages), _sane("prompt", sane_prompts))
"""Requests a client would send (most are served), each field valid but maybe extreme."""
nearly_sane_json = st.builds(
    _one_hostile,
    sane_json,
    st.sampled_from([*SANE, "model", "messages", "prompt", "x"]),
    json_values,
)
"""A served request with one field hostile: the validation of each field, one at a time."""

bodies = st.one_of(
    sane_json.map(_dumps),
    nearly_sane_json.map(_dumps),
    request_json.map(_dumps),
    request_json.map(lambda v: json.dumps(v, ensure_ascii=False).encode("utf-8", "surrogatepass")),
    json_values.map(_dumps),
    st.tuples(request_json.map(_dumps), st.integers(0, 200)).map(lambda t: t[0][: t[1]]),
    st.binary(max_size=64),
)
"""Request bodies as sent on the wire: mostly JSON requests with hostile values; also any
JSON value, JSON cut short, and bytes that are not JSON (or not UTF-8) at all."""

header_text = st.text(
    st.characters(min_codepoint=0x20, max_codepoint=0xFF, exclude_characters="\x7f"), max_size=40
)
numbers_as_text = st.one_of(
    st.integers(-(10**6), 10**12).map(str),
    st.floats().map(str),
    st.sampled_from(["1e309", "-0", "0.0000001", "1_000", " 5", "5 ", "0x10", "inf", "nan"]),
)
sane_headers = st.fixed_dictionaries(
    {},
    optional={
        "authorization": st.sampled_from([f"Bearer {API_KEY}", f"Bearer {OTHER_KEY}"]),
        "x-workload-class": st.sampled_from(["interactive", "batch"]),
        "x-request-deadline-ms": st.integers(1, 100_000).map(str),
        "x-session-id": st.sampled_from(["s1", "s2"]),
        "x-request-id": st.sampled_from(["r-1", "r-2"]),
        "x-stainless-retry-count": st.sampled_from(["0", "1"]),
    },
)
hostile_headers = st.fixed_dictionaries(
    {},
    optional={
        "authorization": st.one_of(
            st.sampled_from([f"Bearer {API_KEY}", f"Bearer {OTHER_KEY}", f"bearer  {API_KEY} "]),
            st.sampled_from(["", "Bearer", "Bearer ", "Basic YTpi", "Bearer sk-wrong"]),
            header_text,
        ),
        "x-request-id": header_text,
        "x-workload-class": st.one_of(
            st.sampled_from(["interactive", "batch", "background", "vip"]), header_text
        ),
        "x-request-deadline-ms": st.one_of(numbers_as_text, header_text),
        "x-session-id": header_text,
        "x-stainless-retry-count": st.one_of(numbers_as_text, header_text),
        "x-retry-attempt": st.one_of(numbers_as_text, header_text),
        "content-type": st.sampled_from(["application/json", "text/plain", ""]),
        "content-length": st.one_of(numbers_as_text, header_text),
    },
)
headers = st.one_of(sane_headers, hostile_headers)
paths = st.sampled_from([CHAT] * 8 + [COMPLETIONS] * 8 + ["/v1/models", "/healthz", "/v1/x"])


# -- the config file ----------------------------------------------------------------------


def base_config() -> dict[str, Any]:
    """A valid config using every section, the fuzzer's starting point."""
    return {
        "server": {"max_body_bytes": 65536, "max_attempts": 2, "max_sequences_per_request": 64},
        "auth": {"anonymous_tenant": "beta"},
        "workload_classes": ["interactive", "batch", "background"],
        "default_workload_class": "interactive",
        "tenants": [
            {
                "name": "acme",
                "api_key_sha256": [key_digest(API_KEY)],
                "weight": 2.0,
                "workload_classes": ["interactive", "batch"],
                "default_deadline_ms": 30000,
            },
            {"name": "beta", "api_key_sha256": [key_digest(OTHER_KEY)], "priority": 1},
        ],
        "backends": [
            {
                "name": "a",
                "url": "http://a.test",
                "models": ["tiny"],
                "max_num_seqs": 4,
                "max_model_len": 2048,
            },
            {"name": "b", "url": "http://b.test", "models": ["tiny", "small"]},
        ],
        "health": {"interval_s": 2.0, "failures_to_down": 2},
        "scrape": {"enabled": False},
        "reload": {"watch": False},
        "policy": {
            "limit": {"type": "server_signals"},
            "fairness": {"type": "vtc"},
            "queue": {"max_wait_s": 30, "discipline": {"type": "deadline"}},
            "gates": [
                {"type": "tenant_quota", "parameters": {"default": {"tokens_per_minute": 100000}}},
                {"type": "retry_budget"},
                {"type": "deadline_feasibility", "shadow": True},
            ],
            "ladder": {
                "steps": [{"name": "cap", "at": 0.8, "action": "cap_max_tokens", "max_tokens": 256}]
            },
            "retry_after": {"min_s": 0.5, "max_s": 60, "jitter": 0.2},
        },
    }


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(node, dict):
        for k, v in node.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += _paths(v, (*prefix, i))
    return out


BASE_PATHS = _paths(base_config())[1:]
KEYS = ["type", "name", "parameters", "max_s", "at", "default", "steps", "tenants", "x", ""]
yaml_values = st.one_of(json_values, st.sampled_from(KEYS), st.sampled_from(BASE_PATHS).map(list))


@st.composite
def config_documents(draw: st.DrawFn) -> bytes:
    """A config file's bytes: the base config with a few values replaced, keys added or
    removed, then (sometimes) a character inserted or the text cut short."""
    data = base_config()
    for _ in range(draw(st.integers(0, 4))):
        path = draw(st.sampled_from(BASE_PATHS))
        op = draw(st.sampled_from(["set", "set", "delete", "add"]))
        _mutate(data, path, op, draw(yaml_values), draw(st.sampled_from(KEYS)))
    raw = yaml.safe_dump(data, allow_unicode=draw(st.booleans())).encode("utf-8", "surrogatepass")
    damage = draw(st.sampled_from(["none", "none", "none", "insert", "cut"]))
    at = draw(st.integers(0, len(raw)))
    if damage == "insert":
        raw = (
            raw[:at]
            + draw(st.sampled_from([b":", b"-", b" ", b"\t", b"{", b"'", b"\xff"]))
            + raw[at:]
        )
    elif damage == "cut":
        raw = raw[:at]
    return raw


def _mutate(data: Any, path: tuple[Any, ...], op: str, value: Any, key: str) -> None:
    parent = data
    for step in path[:-1]:
        try:
            parent = parent[step]
        except (KeyError, IndexError, TypeError):
            return  # an earlier mutation changed the shape: nothing to do here
    last = path[-1]
    if isinstance(parent, dict) and (last in parent or op != "delete"):
        if op == "delete":
            del parent[last]
        elif op == "add" and isinstance(parent.get(last), dict):
            parent[last][key] = value
        else:
            parent[last] = value
    elif isinstance(parent, list) and isinstance(last, int) and last < len(parent):
        if op == "delete":
            del parent[last]
        else:
            parent[last] = value
