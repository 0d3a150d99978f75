"""The book of promised returns: what it holds, when a return claims a promise, when a
promise lapses, per tenant and in total."""

from __future__ import annotations

from policies.engine.promise_book import PromiseBook


def test_outstanding_sums_a_tenants_promises_and_total_sums_every_tenant() -> None:
    book = PromiseBook()
    assert not book and book.total(0.0) == 0.0
    book.book("a", due=2.0, lapse_at=4.0, tokens=30.0)
    book.book("a", due=1.0, lapse_at=3.0, tokens=20.0)
    book.book("b", due=5.0, lapse_at=7.0, tokens=7.0)
    assert book
    assert (book.outstanding("a", 0.0), book.outstanding("b", 0.0)) == (50.0, 7.0)
    assert book.outstanding("nobody", 0.0) == 0.0
    assert book.total(0.0) == 57.0


def test_a_return_claims_the_earliest_promise_once_it_is_due_and_not_before() -> None:
    book = PromiseBook()
    book.book("a", due=2.0, lapse_at=4.0, tokens=30.0)
    book.book("a", due=1.0, lapse_at=3.0, tokens=20.0)
    assert book.due("a", 0.999) is None and book.claim("a", 0.999) is None  # early
    assert book.due("a", 1.0) == 20.0  # peeks: nothing taken
    assert book.claim("a", 1.0) == 20.0
    assert book.outstanding("a", 1.0) == 30.0
    assert book.claim("a", 1.5) is None  # the next one is due at 2.0
    assert book.claim("b", 5.0) is None  # another tenant's return claims nothing of a's
    assert book.claim("a", 2.0) == 30.0
    assert not book and book.total(2.0) == 0.0


def test_a_promise_lapses_after_its_lapse_time_and_releases_its_tokens() -> None:
    book = PromiseBook()
    book.book("a", due=1.0, lapse_at=3.0, tokens=20.0)
    book.book("a", due=2.0, lapse_at=4.0, tokens=30.0)
    assert book.outstanding("a", 3.0) == 50.0  # at its lapse time: still held
    assert book.outstanding("a", 3.001) == 30.0
    assert book.due("a", 3.5) == 30.0  # the lapsed one is not claimed by a late return
    assert book.total(4.001) == 0.0 and not book
