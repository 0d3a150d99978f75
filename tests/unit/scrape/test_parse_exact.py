"""The narrow parser's counts: wanted samples up to the bound and not one more, bad lines
counted, comments and blank lines skipped, and label sets in each written form."""

from __future__ import annotations

from gateway.backends.scrape.parse import RawSeries, parse_narrow, parse_reference

WANTED = frozenset({"a", "b_count"})
BODY = (
    "# HELP a something\n"
    "\n"
    'a{x="1"} 1\r\n'
    "other 5\n"
    "b_count 2.5 1700000000\n"
    "a notanumber\n"
    "a\n"
    'a{y="2",z="3",} 4\n'
)


def test_wanted_samples_are_counted_and_bad_lines_too() -> None:
    out = parse_narrow(BODY, WANTED)
    assert (out.count, out.bad_lines, out.truncated) == (3, 2, False)
    assert out.series == {
        "a": [({"x": "1"}, 1.0), ({"y": "2", "z": "3"}, 4.0)],
        "b_count": [({}, 2.5)],
    }


def test_parsing_stops_once_the_bound_is_reached_by_a_further_wanted_sample() -> None:
    exact = parse_narrow('a{x="1"} 1\nb_count 2\n', WANTED, max_samples=2)
    assert (exact.count, exact.truncated) == (2, False)
    over = parse_narrow('a{x="1"} 1\nb_count 2\nother 1\na 3\nb_count 4\n', WANTED, max_samples=2)
    assert (over.count, over.truncated, over.series["b_count"]) == (2, True, [({}, 2.0)])
    assert RawSeries().count == 0


def test_labels_with_odd_spacing_or_an_open_quote() -> None:
    spaced = parse_narrow('a{x = "1", y="2"} 1\n', WANTED)
    assert spaced.series["a"] == [({"x": "1", "y": "2"}, 1.0)]
    escaped = parse_narrow('a{x="line\\nnext",y="back\\\\slash",z="plain"} 1\n', WANTED)
    assert escaped.series["a"] == [({"x": "line\nnext", "y": "back\\slash", "z": "plain"}, 1.0)]


def test_the_default_bound_takes_five_thousand_samples() -> None:
    body = "".join(f'a{{i="{i}"}} 1\n' for i in range(5000))
    out = parse_narrow(body, WANTED)
    assert (out.count, out.truncated) == (5000, False)
    assert parse_narrow(body + "b_count 1\n", WANTED).truncated


def test_the_reference_parser_counts_the_body_it_gives_up_on() -> None:
    assert parse_reference("a{{{ garbage\n", WANTED).bad_lines == 1
