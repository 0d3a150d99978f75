"""The checker itself: it must see every selector, reject what is not PromQL, and refuse
a selector it cannot name (otherwise the dashboard tests could pass vacuously)."""

from __future__ import annotations

import pytest

from tests.unit.deploy.promql import (
    UnnamedSelector,
    metric_names,
    template_selector,
    unknown_names,
)


def test_finds_selectors_inside_functions_ranges_and_binary_operators() -> None:
    expr = (
        'histogram_quantile(0.99, sum by (le) (rate(a_bucket{x="1"}[$__rate_interval])))'
        " / on (job) b unless c offset 1m"
    )
    assert metric_names(expr) == {"a_bucket", "b", "c"}


def test_an_unknown_function_or_bad_syntax_is_an_error() -> None:
    with pytest.raises(ValueError):
        metric_names("no_such_function(a)")
    with pytest.raises(ValueError):
        metric_names("sum(rate(a[5m])")


def test_a_nameless_selector_is_refused() -> None:
    with pytest.raises(UnnamedSelector):
        metric_names('{__name__=~"sluicegate_.*"}')


def test_unknown_names_reports_only_what_is_missing() -> None:
    assert unknown_names(["a + b", "a"], {"a"}) == {"a + b": {"b"}}


def test_template_selector_reads_label_values() -> None:
    assert template_selector('label_values(m{job=~"$job"}, instance)') == 'm{job=~"$job"}'
