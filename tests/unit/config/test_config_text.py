"""Config text that YAML accepts but is not valid Unicode (a lone surrogate, written as a
``\\uD800`` escape) is refused with its line, like any other config error."""

from __future__ import annotations

import pytest

from gateway.config.schema import ConfigError, load_config_bytes

BASE = """\
tenants:
  - name: acme
backends:
  - name: a
    url: http://a.test
    models: [tiny]
policy:
  gates:
    - type: tenant_quota
      parameters:
        default: {tokens_per_minute: 1000}
"""


@pytest.mark.parametrize(
    ("text", "line"),
    [
        (BASE.replace("name: a\n", 'name: "a\\uD800"\n'), 4),
        (BASE.replace("default:", '"\\uDFFF":'), 11),
        (BASE + 'x-note: ["\\uD800"]\n', 12),
    ],
    ids=["value", "key", "list item"],
)
def test_a_lone_surrogate_is_a_located_config_error(text: str, line: int) -> None:
    with pytest.raises(ConfigError) as err:
        load_config_bytes(text.encode(), "c.yaml")
    issues = err.value.issues
    assert [(i.line, "lone surrogate" in i.message) for i in issues] == [(line, True)]


def test_the_same_config_without_it_loads() -> None:
    assert load_config_bytes(BASE.encode(), "c.yaml").version
