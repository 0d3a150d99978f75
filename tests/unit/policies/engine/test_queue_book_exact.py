"""The queue book's exact amounts: tokens and per-model counts as entries of two models
come and go, the gates each remove hands back, what the structures hold (removal is lazy),
and expiry at its very instant."""

from __future__ import annotations

from policies.contracts import QueuedEntry
from policies.engine.queue_book import QueueBook
from policies.types import RequestInfo, WorkEstimate
from tests.unit.policies.helpers import queued


def _entry(seq: int, model: str, prompt: int, output: int, expires_at: float) -> QueuedEntry:
    req = RequestInfo(f"r{seq}", "t", "interactive", model, WorkEstimate(prompt, output), 0.0)
    return queued(req, seq, 0.0, expires_at)


def _three() -> tuple[QueueBook, QueuedEntry, QueuedEntry, QueuedEntry]:
    book = QueueBook()
    a, b, c = _entry(1, "m", 100, 20, 5.0), _entry(2, "x", 7, 3, 2.0), _entry(3, "m", 1, 1, 9.0)
    book.add(a, ("quota",))
    book.add(b, ())
    book.add(c, ("quota", "deadline"))
    return book, a, b, c


def test_tokens_and_models_count_every_entry_in_and_out() -> None:
    book, a, b, c = _three()
    assert (len(book), book.tokens, book.models) == (3, 132, {"m": 2, "x": 1})
    assert book.get("r2") is b and book.get("r9") is None
    assert book.remove(a) == ("quota",)
    assert (len(book), book.tokens, book.models) == (2, 12, {"m": 1, "x": 1})
    assert book.get("r1") is None and not a.alive
    assert book.remove(b) == ()
    assert (book.tokens, book.models) == (2, {"m": 1})
    assert book.remove(c) == ("quota", "deadline")
    assert (len(book), book.tokens, book.models) == (0, 0, {})


def test_removal_is_lazy_the_reads_skip_what_left() -> None:
    book, a, b, c = _three()
    assert book.held() == 6  # each entry in the arrival deque and the expiry heap
    book.remove(b)  # the one expiring first
    assert book.held() == 6  # still held, dead, until it reaches a front
    assert book.next_expiry() == 5.0 and book.held() == 5
    book.remove(a)  # the oldest
    assert book.oldest() is c and book.held() == 3
    assert book.live() == [c]


def test_an_entry_expires_at_its_expiry_instant_and_not_before() -> None:
    book, a, b, c = _three()
    assert not book.due(1.999)
    assert list(book.expired(1.999)) == []
    assert book.due(2.0)
    assert list(book.expired(2.0)) == [b]
    book.remove(b)
    book.remove(a)  # left before its expiry: never yielded
    assert not book.due(4.999)
    assert book.due(5.0)  # its dead item is still at the front
    assert list(book.expired(9.0)) == [c]
    assert not QueueBook().due(0.0) and QueueBook().next_expiry() is None
    assert QueueBook().oldest() is None
