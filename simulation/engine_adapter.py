"""The emulator's engine model (``emulator.engine.Engine``) behind the simulator's port.

It also plays the gateway's scraper: ``view`` reports what vLLM's /metrics would show
(running, waiting, KV usage, the KV size and block size ``vllm:cache_config_info`` states,
queue/TTFT/e2e quantiles and token rates over a sliding window of finished requests, and
the step time now and its floor from the inter-token latencies, read every ``SCRAPE_S``),
so signal-driven policies see what they would see live.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass

from emulator.engine import Engine, FinishedRequest
from emulator.profile import Profile
from policies.backends import BackendsSnapshot, BackendView
from policies.step_latency import StepLatency
from simulation.metrics import nearest_rank
from simulation.ports import EngineRequest, EngineStep

SIGNAL_WINDOW_S = 30.0
"""Sliding window for the histogram- and counter-derived signals, in seconds."""
SCRAPE_S = 0.5
"""How often the step time is read, as the gateway scrapes by default (``scrape.interval_s``)."""


@dataclass(slots=True)
class _ItlTotals:
    """vLLM's inter-token latency histogram's sum and count, as a scrape reads them."""

    sum: float = 0.0
    count: float = 0.0


class EmulatedBackend:
    """One emulated vLLM instance serving ``model`` with ``profile``'s engine."""

    def __init__(self, profile: Profile, *, name: str = "sim-0", model: str = "sim-model") -> None:
        self.profile = profile
        self.engine = Engine(profile.engine)
        self._name, self._models = name, frozenset({model})
        self._recent = _FinishedWindow()
        self._preemptions: deque[float] = deque()
        self._signals: dict[str, float | None] = {}
        self._signals_at = float("-inf")
        self._cache_counts: deque[tuple[float, int, int]] = deque()
        """(time, prefix-cache queries, hits) at each signal refresh, over the window."""
        self._itl = _ItlTotals()
        self._step_latency = StepLatency()
        self._scraped_at = float("-inf")
        self._view: BackendView | None = None
        """The view last built, while nothing it reads has changed since (None: rebuild)."""
        self._reach: tuple[float, float] | None = None
        """(from, to) of the last ``decode_reach``, while the engine has not changed since."""

    def add(self, request: EngineRequest, now: float) -> None:
        rid, prompt, output = request.request_id, request.prompt_tokens, request.output_tokens
        self.engine.add(rid, prompt, output, now, block_hashes=request.block_hashes)
        self._view = self._reach = None

    def abort(self, request_id: str) -> None:
        self.engine.abort(request_id)
        self._view = self._reach = None

    def step(self, now: float, until: float | None = None) -> EngineStep | None:
        """The engine's next step at ``now``. With ``until`` (the caller handles nothing
        before it), a step that only advanced decoding runs on with the plain decode steps
        that start before then (``Engine.decode_ahead``), as one step: what the caller sees
        at any time from ``until`` on is the same."""
        if not self.engine.has_work:
            return None
        result = self.engine.step(now)
        self._view = self._reach = None
        if result.duration_s <= 0.0 and not result.finished and not result.tokens_emitted:
            return None  # blocked (e.g. no KV blocks): the next add/finish will retry
        end = result.ended_at
        if result.inter_token_latencies_s:
            self._itl.sum += sum(result.inter_token_latencies_s)
            self._itl.count += len(result.inter_token_latencies_s)
        for done in result.finished:
            self._recent.add(done)
        self._preemptions.extend(end for _ in result.preempted)
        if result.finished or result.preempted:
            self._signals_at = float("-inf")
        changed = bool(result.first_tokens or result.finished or result.preempted)
        if not changed and until is not None:
            run = self.engine.decode_ahead(end, until)
            if run is not None:
                for itl_sum in run.itl_sums:
                    self._itl.sum += itl_sum
                self._itl.count += run.batch * len(run.itl_sums)
                end = run.ended_at
        return EngineStep(
            ends_at=end,
            first_token=result.first_tokens,
            finished=tuple(f.req_id for f in result.finished),
            changed=changed,
        )

    def decode_reach(self, now: float) -> float:
        """``Engine.decode_reach``, kept while the engine has not changed."""
        if self._reach is None or self._reach[0] != now:
            self._reach = (now, self.engine.decode_reach(now))
        return self._reach[1]

    def view(self, now: float) -> BackendView:
        """The backend as the gateway sees it now. The same object as the last call while
        the engine has not moved and no signal is due to refresh: the scheduler then keeps
        what it worked out from it (``Placement.observe``), as it does between two scrapes."""
        if now - self._signals_at > 1.0:
            self._signals = self._window_signals(now)
            self._signals_at = now
            self._view = None
        if now - self._scraped_at >= SCRAPE_S:
            self._step_latency.add(now, self._itl)  # it reads the totals as they are now
            self._scraped_at = now
            self._view = None
        if self._view is not None:
            return self._view
        cfg = self.profile.engine
        self._view = BackendView(
            name=self._name,
            models=self._models,
            max_num_seqs=cfg.max_num_seqs,
            max_model_len=cfg.max_model_len,
            running=float(self.engine.num_running),
            waiting=float(self.engine.num_waiting),
            kv_cache_usage=self.engine.kv_cache_usage,
            kv_cache_tokens=float(cfg.kv_cache_size_tokens),
            kv_block_size=cfg.block_size,
            itl_s=self._step_latency.itl_s,
            itl_floor_s=self._step_latency.floor_s,
            signal_age_s=0.0,
            **self._signals,  # type: ignore[arg-type]
        )
        return self._view

    def _hit_rate(self, now: float) -> float | None:
        """vLLM's counters as the scraper reads them: hits over queries in the window."""
        queries, hits = self.engine.prefix_cache_queries, self.engine.prefix_cache_hits
        counts = self._cache_counts
        counts.append((now, queries, hits))
        while len(counts) > 1 and counts[1][0] <= now - SIGNAL_WINDOW_S:
            counts.popleft()
        _, q0, h0 = counts[0]
        if queries > q0:
            return (hits - h0) / (queries - q0)
        return hits / queries if queries else None

    def _window_signals(self, now: float) -> dict[str, float | None]:
        rate = self._hit_rate(now)
        signals = self._latency_signals(now)
        signals["prefix_cache_hit_rate"] = rate
        return signals

    def _latency_signals(self, now: float) -> dict[str, float | None]:
        cutoff = now - SIGNAL_WINDOW_S
        done = self._recent
        done.drop_before(cutoff)
        while self._preemptions and self._preemptions[0] < cutoff:
            self._preemptions.popleft()
        if not done:
            return {"preemptions_per_s": len(self._preemptions) / SIGNAL_WINDOW_S}
        return {
            "queue_time_p50_s": nearest_rank(done.queue_s, 50.0),
            "queue_time_p90_s": nearest_rank(done.queue_s, 90.0),
            "ttft_p90_s": nearest_rank(done.ttft_s, 90.0),
            "e2e_p90_s": nearest_rank(done.e2e_s, 90.0),
            "generation_tokens_per_s": done.output_tokens / SIGNAL_WINDOW_S,
            "prompt_tokens_per_s": done.prompt_tokens / SIGNAL_WINDOW_S,
            "preemptions_per_s": len(self._preemptions) / SIGNAL_WINDOW_S,
        }


class KeptViews:
    """Several emulated backends' views as one snapshot: the same views tuple while none of
    them moved, so the scheduler keeps its lookups (``Placement.observe``), as between two
    scrapes."""

    def __init__(self, backends: Iterable[EmulatedBackend]) -> None:
        self._backends = tuple(backends)
        self._views: tuple[BackendView, ...] = ()

    def snapshot(self, now: float) -> BackendsSnapshot:
        views = tuple(b.view(now) for b in self._backends)
        kept = self._views
        if len(views) == len(kept) and all(v is k for v, k in zip(views, kept, strict=True)):
            views = kept
        self._views = views
        return BackendsSnapshot(at=now, backends=views)


class _FinishedWindow:
    """The requests finished since a cutoff, as the signals read them: each latency kept
    sorted and the token counts summed as requests come and go (not at every refresh)."""

    __slots__ = ("_done", "e2e_s", "output_tokens", "prompt_tokens", "queue_s", "ttft_s")

    def __init__(self) -> None:
        self._done: deque[FinishedRequest] = deque()
        self.queue_s: list[float] = []
        self.ttft_s: list[float] = []
        self.e2e_s: list[float] = []
        self.output_tokens = self.prompt_tokens = 0

    def __len__(self) -> int:
        return len(self._done)

    def add(self, f: FinishedRequest) -> None:
        self._done.append(f)
        insort(self.queue_s, f.queue_time_s)
        insort(self.ttft_s, f.ttft_s)
        insort(self.e2e_s, f.e2e_s)
        self.output_tokens += f.output_tokens
        self.prompt_tokens += f.prompt_tokens

    def drop_before(self, cutoff: float) -> None:
        """Forget the requests that finished before ``cutoff`` (in the order they came)."""
        done = self._done
        while done and done[0].finished_at < cutoff:
            f = done.popleft()
            _remove(self.queue_s, f.queue_time_s)
            _remove(self.ttft_s, f.ttft_s)
            _remove(self.e2e_s, f.e2e_s)
            self.output_tokens -= f.output_tokens
            self.prompt_tokens -= f.prompt_tokens


def _remove(ordered: list[float], value: float) -> None:
    del ordered[bisect_left(ordered, value)]


def service_rate_bound_tps(profile: Profile) -> float:
    """An upper bound on completed turns/s: all slots decoding with the cheapest step.

    Prefill and attention only add step time, so no run can beat this.
    """
    cfg = profile.engine
    step_s = cfg.step_time.duration(0, cfg.max_num_seqs, 0)
    return cfg.max_num_seqs / step_s / profile.output_lengths.mean


def knee_agents(profile: Profile, think_mean_s: float) -> float:
    """The saturation knee N* = X_max * (S + Z) (interactive response time law).

    X_max is ``service_rate_bound_tps``; S the mean turn's decode time at full batch.
    """
    cfg = profile.engine
    service_s = profile.output_lengths.mean * cfg.step_time.duration(0, cfg.max_num_seqs, 0)
    return service_rate_bound_tps(profile) * (service_s + think_mean_s)
