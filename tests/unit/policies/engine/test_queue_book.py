"""``QueueBook`` drops dead entries with a bound: under a long run of submit and dispatch
with a wait bound far beyond the run (nothing expires, so the expiry heap never pops) and
one old request that never leaves (so the arrival deque never drains from its front), the
entries it holds stay within twice the live ones plus a constant, and every read still
answers as a plain model of the queue does."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from policies.contracts import QueuedEntry
from policies.engine.queue_book import QueueBook
from tests.unit.policies.helpers import queued_entry as entry

_SLACK_BOUND = 64  # the book's rebuild slack, restated: the test's own ceiling


def test_entries_held_stay_bounded_under_a_long_run_of_submit_and_dispatch() -> None:
    book, rng = QueueBook(), random.Random(3)
    stuck = entry(0, 0.0, 10**9)  # the oldest request: it never dispatches
    book.add(stuck, ())
    live = [stuck]
    peak = 0
    for seq in range(1, 50_001):
        now = seq * 1e-3
        e = entry(seq, now, 3600.0)
        book.add(e, ("g",))
        live.append(e)
        if len(live) > 200:  # dispatch one that is not the oldest, in no particular order
            gone = live.pop(rng.randrange(1, len(live)))
            assert book.remove(gone) == ("g",)
        peak = max(peak, book.held())
        assert book.held() <= 2 * (2 * len(book) + _SLACK_BOUND) + 2
    assert len(book) == len(live)
    assert peak < 2_000  # 50,000 dispatched: without compaction ~100,000 would be held
    assert book.oldest() is stuck
    assert book.live() == sorted(live, key=lambda x: x.seq)
    assert book.next_expiry() == min(x.expires_at for x in live)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.floats(0.0, 5.0), st.integers(0, 10**6)), max_size=400))
def test_reads_match_a_plain_model_across_compactions(ops: list[tuple[bool, float, int]]) -> None:
    book = QueueBook()
    live: dict[int, QueuedEntry] = {}
    now = 0.0
    for seq, (add, wait_s, pick) in enumerate(ops):
        now += 0.01
        if add or not live:
            e = entry(seq, now, wait_s)
            book.add(e, ())
            live[seq] = e
        else:
            book.remove(live.pop(sorted(live)[pick % len(live)]))
        if seq % 7 == 0:  # expire as the scheduler does: the caller removes what is yielded
            for gone in list(book.expired(now)):
                book.remove(gone)
                del live[gone.seq]
        ordered = sorted(live.values(), key=lambda x: x.seq)
        assert book.live() == ordered
        assert book.oldest() is (ordered[0] if ordered else None)
        due = [x.expires_at for x in ordered]
        assert book.next_expiry() == (min(due) if due else None)
        assert book.tokens == sum(x.request.estimate.total for x in ordered)
        assert book.held() <= 2 * (2 * len(book) + _SLACK_BOUND) + 2
