"""A pure, clock-free model of one vLLM V1 engine core (continuous batching, one model, one card).

No I/O, no asyncio, no clock: the caller passes ``now`` (seconds on any monotonic clock, real
or virtual) and the engine says how long each step takes. The HTTP emulator drives it on the
wall clock (scaled by ``--speed``); the discrete-event simulator drives it on a virtual clock.

API::

    engine = Engine(profile.engine)                  # EngineConfig from emulator.profile
    engine.add("r1", prompt_tokens=700, output_tokens=354, now=t)   # raises EngineBusy / ValueError
    while engine.has_work:
        step = engine.step(now=t)                    # schedules a batch at t, returns StepResult
        t += step.duration_s                         # its outputs are stamped at t + duration_s
        step.tokens_emitted                          # {req_id: 1} for each sequence that sampled
        step.ttft_s / step.finished / step.preempted
    engine.abort("r1")                               # client gone: frees its slot and KV blocks
    engine.decode_ahead(now=t, until=t_next)         # plain decode steps back to back (simulator)

Scheduling follows ``vllm/v1/core/sched/scheduler.py`` with the FCFS policy:

1. Running requests first, in order. Each needs ``num_tokens - num_computed`` new tokens
   (1 when decoding, the rest of the prompt when prefilling), capped by what is left of the
   per-step budget ``max_num_batched_tokens`` (chunked prefill). When its KV blocks cannot be
   allocated, the last running request is preempted (all blocks freed, progress lost, put at
   the head of the waiting queue: recompute), until it fits or it preempted itself.
2. Only if nothing was preempted: waiting requests in FCFS order while slots
   (``max_num_seqs``), budget and KV blocks last. A waiting request that does not fit blocks
   the ones behind it.
3. A sequence whose computed tokens reach its length samples one token at the end of the step.
   It finishes when it has ``output_tokens`` tokens.

Prefix cache (``enable_prefix_caching``, on by default as in vLLM V1): a request added with
the chained hashes of its prompt's full blocks (``emulator.prefix_hash``) starts, when first
scheduled, from the longest run of them the block pool still holds (at most ``num_tokens - 1``
tokens: the last one is always computed), so those tokens cost no prefill. The pool
(``emulator.block_pool``) keeps freed blocks findable until they are handed out again, least
recently freed first. ``prefix_cache_queries`` / ``prefix_cache_hits`` count the tokens looked
up and found at each admission, not at preempted requests' re-admission, as vLLM counts them.

A step's cost follows what changes in it, not the batch's size: the running sequences that
decode in step (``_Decoders``) gain their token together, counted once per step; each one's
own counts are read when it needs a new block, finishes or leaves. A step that cannot
schedule every running sequence whole (the token budget, the free blocks) takes them one at
a time. ``tests/unit/emulator/test_decoders.py`` checks both step for step.

Timestamps follow vLLM's request stats: ``arrival`` (add), ``scheduled_at`` (first scheduled,
not re-set by preemption), ``first_token_at`` and ``finished_at`` (end of the emitting step).
Admission mirrors vLLM's front end: ``max_num_queued_reqs`` caps waiting + running and
``max_num_queued_tokens`` caps prompt tokens of requests not yet past prefill; both raise
``EngineBusy`` (vLLM answers HTTP 503 and counts ``vllm:admission_rejections_total``).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import filterfalse, repeat
from operator import attrgetter

from emulator.block_pool import BlockPool
from emulator.engine_values import (
    FINISH_LENGTH,
    FINISH_STOP,
    DecodeRun,
    EngineBusy,
    FinishedRequest,
    StepResult,
)
from emulator.prefix_hash import BlockHash
from emulator.profile import EngineConfig

__all__ = [
    "FINISH_LENGTH",
    "FINISH_STOP",
    "DecodeRun",
    "Engine",
    "EngineBusy",
    "FinishedRequest",
    "StepResult",
]


@dataclass(slots=True, eq=False)
class _Seq:
    req_id: str
    prompt_tokens: int
    output_tokens: int
    finish_reason: str
    arrival: float
    block_hashes: tuple[BlockHash, ...] = ()
    generated: int = 0
    computed: int = 0
    blocks: list[int] = field(default_factory=list)
    cached_blocks: int = 0
    """How many of ``blocks`` carry their hash in the pool (vLLM's ``num_cached_block``)."""
    cached_tokens: int | None = None
    """Prompt tokens served by the prefix cache at first scheduling (vLLM's num_cached_tokens)."""
    preemptions: int = 0
    scheduled_at: float | None = None
    first_token_at: float | None = None
    last_token_at: float | None = None
    order: int = 0
    """When it was (last) admitted to the running batch: the running list is in this order."""
    decoding: bool = False
    """A member of the engine's ``_Decoders``: ``computed``, ``generated`` and
    ``last_token_at`` are as of ``synced`` (``_Decoders.sync`` brings them up to date)."""
    synced: int = 0

    @property
    def num_tokens(self) -> int:
        return self.prompt_tokens + self.generated

    @property
    def remaining(self) -> int:
        return self.num_tokens - self.computed


class _DecodePlan:
    """The plain decode steps an engine could run from ``now`` (``Engine.decode_ahead``)."""

    __slots__ = ("batch", "by_offset", "context", "engine", "now", "steps_left")

    def __init__(
        self,
        engine: Engine,
        now: float,
        batch: int,
        steps_left: int,
        context: int,
        by_offset: list[list[_Seq]],
    ) -> None:
        self.engine, self.now, self.batch = engine, now, batch
        self.steps_left, self.context, self.by_offset = steps_left, context, by_offset

    def steps(self, until: float) -> Iterator[tuple[float, float, list[_Seq]]]:
        """(start, end, the sequences that need a new block) of each step, while each
        starts before ``until``, none finishes a sequence and the free blocks last."""
        cfg = self.engine.config
        duration, free, block = cfg.step_time.duration, self.engine._pool.num_free, cfg.block_size
        batch, context, end = self.batch, self.context, self.now
        for k in range(self.steps_left):
            if end >= until:
                return
            grow = self.by_offset[-k % block]  # a sequence at a block's end needs a new one
            if len(grow) > free:
                return
            free -= len(grow)
            start, end = end, end + duration(0, batch, context)
            context += batch
            yield start, end, grow


class _Firsts:
    """The sequences whose first token a step emits: each one's time to first token, and the
    prompt tokens of their completed prefills (vLLM counts them so), the cached ones apart."""

    __slots__ = ("cached_tokens", "prompt_tokens", "ttft")

    def __init__(self) -> None:
        self.ttft: dict[str, float] = {}
        self.prompt_tokens = self.cached_tokens = 0

    def add(self, seq: _Seq, end: float) -> None:
        seq.first_token_at = end
        self.ttft[seq.req_id] = end - seq.arrival
        self.prompt_tokens += seq.prompt_tokens
        self.cached_tokens += seq.cached_tokens or 0


class _Decoders:
    """The running sequences that decode in step: each emitted its last token at
    ``emitted_at`` and gains one token per step that schedules it. A step that schedules
    them all counts it once (``tick``); a member's own counts are brought up to date only
    when read (``sync``): when it needs a new block, finishes or leaves.

    What stays fixed while a member ticks: ``computed - ticks`` (so the members that need a
    new block at a step are those of one block offset) and ``generated - ticks`` (so those
    that finish at a step are known ahead)."""

    __slots__ = ("by_offset", "context_base", "emitted_at", "finishing", "size", "ticks")

    def __init__(self, block_size: int) -> None:
        self.ticks = 0
        self.emitted_at = 0.0
        self.size = 0
        self.context_base = 0
        """Sum of the members' ``computed - ticks``."""
        self.by_offset: list[dict[_Seq, None]] = [{} for _ in range(block_size)]
        self.finishing: dict[int, dict[_Seq, None]] = {}
        """Members by the ``ticks`` at whose step they emit their last token."""

    def clear(self) -> None:
        """No members (each one's counts synced and its flag cleared by the caller)."""
        self.size = self.context_base = 0
        for bucket in self.by_offset:
            bucket.clear()
        self.finishing.clear()

    def context(self) -> int:
        """The members' computed tokens now."""
        return self.context_base + self.size * self.ticks

    def sync(self, s: _Seq) -> None:
        behind = self.ticks - s.synced
        if behind:
            s.computed += behind
            s.generated += behind
            s.last_token_at = self.emitted_at
            s.synced = self.ticks

    def join(self, s: _Seq) -> None:
        """``s`` (it emitted at ``emitted_at``, decodes next) becomes a member."""
        ticks = self.ticks
        s.decoding, s.synced = True, ticks
        self.size += 1
        self.context_base += s.computed - ticks
        self.by_offset[(s.computed - ticks) % len(self.by_offset)][s] = None
        last = s.output_tokens - s.generated + ticks
        self.finishing.setdefault(last, {})[s] = None

    def leave(self, s: _Seq) -> None:
        """``s`` stops being a member, its counts up to date."""
        self.sync(s)
        ticks = self.ticks
        s.decoding = False
        self.size -= 1
        self.context_base -= s.computed - ticks
        del self.by_offset[(s.computed - ticks) % len(self.by_offset)][s]
        last = s.output_tokens - s.generated + ticks
        bucket = self.finishing[last]
        del bucket[s]
        if not bucket:
            del self.finishing[last]

    def growing(self) -> dict[_Seq, None]:
        """The members whose next token needs a new block (their computed tokens fill
        whole blocks)."""
        return self.by_offset[-self.ticks % len(self.by_offset)]

    def tick(self, end: float) -> list[_Seq]:
        """A step scheduled every member and ended at ``end``; returns the members it
        finished, synced and no longer members."""
        self.ticks += 1
        self.emitted_at = end
        done = list(self.finishing.get(self.ticks, ()))
        for s in done:
            self.leave(s)
        return done


_order = attrgetter("order")
_decoding = attrgetter("decoding")
_req_id = attrgetter("req_id")


class Engine:
    """One vLLM engine core. Not thread-safe: one caller drives it."""

    def __init__(self, config: EngineConfig) -> None:
        self.config = config
        self._waiting: deque[_Seq] = deque()
        self._running: list[_Seq] = []
        self._by_id: dict[str, _Seq] = {}
        self._pool = BlockPool(config.num_gpu_blocks, enable_caching=config.enable_prefix_caching)
        self.num_preemptions = 0
        self.prefix_cache_queries = 0
        """Prompt tokens looked up in the prefix cache at admission (preempted ones apart)."""
        self.prefix_cache_hits = 0
        """Of those, tokens served from the cache."""
        self._step_queries = self._step_hits = 0
        self._decoders = _Decoders(config.block_size)
        self._admitted = 0
        """Admissions to the running batch so far (each one's ``_Seq.order``)."""

    # -- state -------------------------------------------------------------------------------
    @property
    def has_work(self) -> bool:
        return bool(self._waiting or self._running)

    @property
    def num_running(self) -> int:
        return len(self._running)

    @property
    def num_waiting(self) -> int:
        return len(self._waiting)

    @property
    def num_preempted_waiting(self) -> int:
        """Waiting requests that were preempted (vLLM's ``waiting_by_reason{reason=preempted}``)."""
        return sum(1 for s in self._waiting if s.preemptions > 0)

    @property
    def kv_cache_usage(self) -> float:
        """Fraction of usable KV blocks in use, 0..1 (``vllm:kv_cache_usage_perc``)."""
        return 1.0 - self._pool.num_free / self._pool.num_usable

    @property
    def queued_prompt_tokens(self) -> int:
        """Prompt tokens of requests not yet past prefill (``max_num_queued_tokens`` counts)."""
        return sum(s.prompt_tokens for s in self._by_id.values() if s.first_token_at is None)

    def __contains__(self, req_id: object) -> bool:
        return req_id in self._by_id

    def generated_tokens(self, req_id: str) -> int | None:
        """Output tokens ``req_id`` has had so far (None: unknown or finished)."""
        seq = self._by_id.get(req_id)
        if seq is None:
            return None
        if seq.decoding:
            self._decoders.sync(seq)
        return seq.generated

    # -- requests ----------------------------------------------------------------------------
    def add(
        self,
        req_id: str,
        prompt_tokens: int,
        output_tokens: int,
        now: float,
        *,
        finish_reason: str = FINISH_LENGTH,
        block_hashes: tuple[BlockHash, ...] = (),
    ) -> None:
        """Queue a request (FCFS). ``finish_reason``: ``length`` (max_tokens hit) or ``stop``.

        ``block_hashes``: the chained hashes of the prompt's full blocks
        (``emulator.prefix_hash.block_hashes`` at this engine's block size); without them the
        request neither hits nor fills the prefix cache.

        Raises ``ValueError`` for an impossible request (vLLM's 400) and ``EngineBusy`` when an
        admission cap is reached (vLLM's 503).
        """
        if req_id in self._by_id:
            raise ValueError(f"duplicate request id {req_id!r}")
        if prompt_tokens < 1 or output_tokens < 1:
            raise ValueError("prompt_tokens and output_tokens must be >= 1")
        if prompt_tokens + output_tokens > self.config.max_model_len:
            raise ValueError(
                f"{prompt_tokens} prompt + {output_tokens} output tokens exceed "
                f"max_model_len {self.config.max_model_len}"
            )
        self._check_admission(prompt_tokens)
        seq = _Seq(
            req_id, prompt_tokens, output_tokens, finish_reason, now, block_hashes=block_hashes
        )
        self._by_id[req_id] = seq
        self._waiting.append(seq)

    def _check_admission(self, prompt_tokens: int) -> None:
        cap_reqs = self.config.max_num_queued_reqs
        if cap_reqs is not None and len(self._by_id) + 1 > cap_reqs:
            raise EngineBusy("max_num_queued_reqs")
        cap_tokens = self.config.max_num_queued_tokens
        if cap_tokens is not None and self.queued_prompt_tokens >= cap_tokens:
            raise EngineBusy("max_num_queued_tokens")

    def abort(self, req_id: str) -> bool:
        """Drop a request wherever it is; frees its slot and blocks. False if unknown/finished."""
        seq = self._by_id.pop(req_id, None)
        if seq is None:
            return False
        if seq.decoding:
            self._decoders.leave(seq)
        if seq in self._running:
            self._running.remove(seq)
        else:
            self._waiting.remove(seq)
        self._free(seq)
        return True

    # -- the step ----------------------------------------------------------------------------
    def step(self, now: float) -> StepResult:
        """Schedule one batch at ``now``, run it, and return what it produced."""
        result = self._step_in_full(now)
        if result is None:
            self._disband()
            result = self._step_each(now)
            self._enlist(self._running, result.ended_at)
        return result

    def _step_in_full(self, now: float) -> StepResult | None:
        """``step`` when it schedules every running sequence whole (their tokens fit the
        budget) and their new blocks are free (no preemption), the ``_Decoders`` counted
        once: None when it would not. Every other sequence, and every block, is handled as
        ``_step_each`` handles it, in the same order."""
        running, decoders, cfg = self._running, self._decoders, self.config
        others = list(filterfalse(_decoding, running))
        demand = decoders.size + sum(s.prompt_tokens + s.generated - s.computed for s in others)
        if demand > cfg.max_num_batched_tokens:
            return None
        growing = decoders.growing()
        block = cfg.block_size
        blocks = len(growing)
        for s in others:
            blocks += max(0, -(-(s.prompt_tokens + s.generated) // block) - len(s.blocks))
        if blocks > self._pool.num_free:
            return None
        self._step_queries = self._step_hits = 0
        batch: list[tuple[_Seq, int]] = []
        allocate = self._pool.allocate
        for s in sorted([*growing, *others], key=_order) if growing else others:
            if s.decoding:  # its blocks are full, its prompt's cached: one more block
                s.blocks += allocate(1)
                continue
            n = s.prompt_tokens + s.generated - s.computed
            tokens = s.computed + n
            if -(-tokens // block) > len(s.blocks):
                self._allocate(s, tokens)
            elif s.cached_blocks < len(s.block_hashes):
                self._cache_full_blocks(s, tokens)
            batch.append((s, n))
        self._schedule_waiting(batch, cfg.max_num_batched_tokens - demand, now)
        if not batch and not decoders.size:
            return self._result(now)
        prefill_tokens, decode, duration = self._priced(batch, decoders.size, decoders.context())
        return self._advance_in_full(batch, now, duration, prefill_tokens, decode)

    def _step_each(self, now: float) -> StepResult:
        """``step``, one running sequence at a time (no ``_Decoders`` member)."""
        budget = self.config.max_num_batched_tokens
        batch: list[tuple[_Seq, int]] = []
        preempted: list[str] = []
        self._step_queries = self._step_hits = 0
        budget = self._schedule_running(batch, preempted, budget)
        if not preempted:
            self._schedule_waiting(batch, budget, now)
        if not batch:
            return self._result(now, preempted=preempted)
        prefill_tokens, decode, duration = self._priced(batch, 0, 0)
        return self._advance(batch, now, duration, prefill_tokens, decode, preempted)

    def _priced(
        self, batch: list[tuple[_Seq, int]], decode: int, context: int
    ) -> tuple[int, int, float]:
        """The step's prefill tokens, decoding sequences and duration: ``batch`` on top of
        ``decode`` sequences, with ``context`` tokens between them, counted already."""
        scheduled = decode
        for s, n in batch:
            scheduled += n
            context += s.computed
            if n == 1 and s.generated > 0 and s.prompt_tokens + s.generated - s.computed == 1:
                decode += 1
        prefill_tokens = scheduled - decode
        return (
            prefill_tokens,
            decode,
            self.config.step_time.duration(prefill_tokens, decode, context),
        )

    def _result(
        self,
        now: float,
        duration: float = 0.0,
        prefill_tokens: int = 0,
        decode_seqs: int = 0,
        emitted: dict[str, int] | None = None,
        firsts: _Firsts | None = None,
        itls: list[float] | None = None,
        finished: tuple[FinishedRequest, ...] = (),
        preempted: list[str] | None = None,
    ) -> StepResult:
        """The step at ``now`` as its ``StepResult``, with this step's prefix-cache lookups;
        a step that scheduled nothing gives only ``now`` (and what it preempted)."""
        firsts = firsts or _Firsts()
        return StepResult(
            started_at=now,
            duration_s=duration,
            prefill_tokens=prefill_tokens,
            decode_seqs=decode_seqs,
            tokens_emitted=emitted or {},
            ttft_s=firsts.ttft,
            new_prompt_tokens=firsts.prompt_tokens,
            new_cached_tokens=firsts.cached_tokens,
            prefix_cache_queries=self._step_queries,
            prefix_cache_hits=self._step_hits,
            inter_token_latencies_s=tuple(itls or ()),
            finished=finished,
            preempted=tuple(preempted or ()),
        )

    def _advance_in_full(
        self,
        batch: list[tuple[_Seq, int]],
        now: float,
        duration: float,
        prefill_tokens: int,
        decode_seqs: int,
    ) -> StepResult:
        """``_advance`` of a step that scheduled every running sequence: ``batch`` holds
        those that are not ``_Decoders`` members, which all gain one token."""
        end = now + duration
        decoders = self._decoders
        firsts = _Firsts()
        own_itl: dict[_Seq, float] = {}
        chunked: set[_Seq] = set()
        done: list[_Seq] = []
        for seq, n in batch:
            seq.computed += n
            if seq.computed < seq.prompt_tokens + seq.generated:
                chunked.add(seq)  # a prefill chunk: no token yet
                continue
            seq.generated += 1
            if seq.first_token_at is None:
                firsts.add(seq, end)
            elif seq.last_token_at is not None:
                own_itl[seq] = end - seq.last_token_at
            seq.last_token_at = end
            if seq.generated >= seq.output_tokens:
                done.append(seq)
        running = self._running  # the batch's order, the members between ``batch``'s
        emitted = dict.fromkeys(map(_req_id, running), 1)
        for seq in chunked:
            del emitted[seq.req_id]
        itl = end - decoders.emitted_at
        itls: list[float] = []
        at = 0
        for seq, _ in batch:
            i = running.index(seq, at)
            itls += repeat(itl, i - at)
            if seq in own_itl:
                itls.append(own_itl[seq])
            at = i + 1
        itls += repeat(itl, len(running) - at)
        last = decoders.tick(end)
        if last:
            done = sorted([*done, *last], key=_order)
        finished = tuple([self._finish(s, end) for s in done])
        self._enlist([s for s, _ in batch], end)
        return self._result(
            now, duration, prefill_tokens, decode_seqs, emitted, firsts, itls, finished
        )

    def _enlist(self, seqs: list[_Seq], end: float) -> None:
        """Those of ``seqs`` that emitted at ``end`` and decode next join the ``_Decoders``
        (all of whose members emitted then)."""
        decoders, block = self._decoders, self.config.block_size
        if not decoders.size:
            decoders.emitted_at = end
        for s in seqs:
            if (
                not s.decoding
                and s.last_token_at == end
                and s.prompt_tokens + s.generated - s.computed == 1
                and s.generated < s.output_tokens
                and s.cached_blocks == len(s.block_hashes)
                and len(s.blocks) == -(-s.computed // block)
            ):
                decoders.join(s)

    def _disband(self) -> None:
        """Every ``_Decoders`` member leaves, its counts up to date."""
        decoders = self._decoders
        if decoders.size:
            members = [s for s in self._running if s.decoding]
            for s in members:
                decoders.sync(s)
                s.decoding = False
            decoders.clear()

    def _sync_all(self) -> None:
        """Every running sequence's counts up to date (the members stay members)."""
        decoders = self._decoders
        if decoders.size:
            for s in self._running:
                if s.decoding:
                    decoders.sync(s)

    def decode_ahead(self, now: float, until: float) -> DecodeRun | None:
        """Plain decode steps back to back from ``now``, each starting before ``until``:
        what ``step`` would do, called at each one's end, while nobody can see the steps in
        between. None when not even one qualifies.

        A step qualifies while every running sequence decodes and emitted at ``now`` (the
        last step), none finishes in it, nothing waiting could join (no waiting request, or
        every slot taken), the whole batch fits the token budget, and the blocks it needs are
        free (no preemption). Each step's duration, its inter-token latencies and its block
        allocations (in the same order) are those of ``step``; only the per-step results are
        not built. A caller that handles nothing before ``until`` sees the same engine.
        """
        plan = self._decode_plan(now)
        if plan is None:
            return None
        self._disband()
        batch, end = plan.batch, now
        itl_sums: list[float] = []
        for start, end, grow in plan.steps(until):
            k = len(itl_sums)
            for s in grow:
                self._allocate(s, s.computed + k + 1)
            itl_sums.append(sum(repeat(end - start, batch)))
        k = len(itl_sums)
        for s in self._running:
            s.computed += k
            s.generated += k
            s.last_token_at = end
        self._enlist(self._running, end)
        if not k:
            return None
        return DecodeRun(ended_at=end, batch=batch, itl_sums=tuple(itl_sums))

    def decode_reach(self, now: float) -> float:
        """Where the plain decode steps from ``now`` (``decode_ahead`` with nothing in the
        way) would end, without running them: no step that finishes, starts or preempts a
        sequence can end before then. ``now`` when none qualifies."""
        plan = self._decode_plan(now)
        end = now
        if plan is not None:
            for step in plan.steps(float("inf")):
                end = step[1]
        return end

    def _decode_plan(self, now: float) -> _DecodePlan | None:
        running, cfg = self._running, self.config
        batch = len(running)
        if not batch or batch > cfg.max_num_batched_tokens:
            return None
        if self._waiting and batch < cfg.max_num_seqs:
            return None
        if self._decoders.size and self._decoders.emitted_at != now:
            return None  # (the members emitted then)
        self._sync_all()
        block = cfg.block_size
        by_offset: list[list[_Seq]] = [[] for _ in range(block)]
        steps_left = context = 0
        for i, s in enumerate(running):
            if s.prompt_tokens + s.generated - s.computed != 1 or s.last_token_at != now:
                return None
            if s.cached_blocks < len(s.block_hashes):
                return None  # (a decoding sequence's prompt blocks are all cached)
            left = s.output_tokens - s.generated - 1  # the step after these finishes it
            if i == 0 or left < steps_left:
                steps_left = left
            context += s.computed
            by_offset[s.computed % block].append(s)
        return _DecodePlan(self, now, batch, steps_left, context, by_offset)

    def _schedule_running(
        self, batch: list[tuple[_Seq, int]], preempted: list[str], budget: int
    ) -> int:
        running, allocate, block = self._running, self._allocate, self.config.block_size
        i = 0
        while i < len(running) and budget > 0:
            seq = running[i]
            n = seq.prompt_tokens + seq.generated - seq.computed  # remaining, within budget
            if n > budget:
                n = budget
            tokens = seq.computed + n
            if -(-tokens // block) > len(seq.blocks):  # new blocks (else as ``_allocate``)
                while not allocate(seq, tokens):
                    victim = running.pop()  # FCFS: the latest arrival goes first
                    self._preempt(victim)
                    preempted.append(victim.req_id)
                    if victim is seq:
                        return budget
            elif seq.cached_blocks < len(seq.block_hashes):
                self._cache_full_blocks(seq, tokens)
            batch.append((seq, n))
            budget -= n
            i += 1
        return budget

    def _schedule_waiting(self, batch: list[tuple[_Seq, int]], budget: int, now: float) -> None:
        while self._waiting and budget > 0 and len(self._running) < self.config.max_num_seqs:
            seq = self._waiting[0]
            hit = self._pool.longest_hit(self._hit_candidates(seq)) if seq.computed == 0 else []
            hit_tokens = len(hit) * self.config.block_size
            n = min(seq.num_tokens - hit_tokens, budget)
            if not self._allocate(seq, hit_tokens + n, hit):
                break
            self._admit(seq, hit_tokens)
            self._waiting.popleft()
            self._running.append(seq)
            seq.order, self._admitted = self._admitted, self._admitted + 1
            if seq.scheduled_at is None:
                seq.scheduled_at = now
            batch.append((seq, n))
            budget -= n

    def _advance(
        self,
        batch: list[tuple[_Seq, int]],
        now: float,
        duration: float,
        prefill_tokens: int,
        decode_seqs: int,
        preempted: list[str],
    ) -> StepResult:
        end = now + duration
        emitted: dict[str, int] = {}
        firsts = _Firsts()
        itl: list[float] = []
        finished: list[FinishedRequest] = []
        for seq, n in batch:
            seq.computed += n
            if seq.computed < seq.prompt_tokens + seq.generated:
                continue  # a prefill chunk: no token yet
            seq.generated += 1
            emitted[seq.req_id] = 1
            if seq.first_token_at is None:
                firsts.add(seq, end)
            elif seq.last_token_at is not None:
                itl.append(end - seq.last_token_at)
            seq.last_token_at = end
            if seq.generated >= seq.output_tokens:
                finished.append(self._finish(seq, end))
        return self._result(
            now,
            duration,
            prefill_tokens,
            decode_seqs,
            emitted,
            firsts,
            itl,
            tuple(finished),
            preempted,
        )

    # -- blocks ----------------------------------------------------------------------------
    def _hit_candidates(self, seq: _Seq) -> tuple[BlockHash, ...]:
        # vLLM recomputes at least the last token (it needs its logits): a hit covers at most
        # num_tokens - 1 tokens, in whole blocks.
        return seq.block_hashes[: (seq.num_tokens - 1) // self.config.block_size]

    def _allocate(self, seq: _Seq, tokens: int, hit: list[int] | None = None) -> bool:
        """Give ``seq`` blocks for ``tokens`` tokens, ``hit`` (cached blocks) first."""
        if not hit and -(-tokens // self.config.block_size) <= len(seq.blocks):
            # Its blocks already hold ``tokens`` (most decode steps): nothing to take.
            if seq.cached_blocks < len(seq.block_hashes):
                self._cache_full_blocks(seq, tokens)
            return True
        hit = hit or []
        need = math.ceil(tokens / self.config.block_size) - len(seq.blocks) - len(hit)
        if max(need, 0) + self._pool.evictable(hit) > self._pool.num_free:
            return False
        self._pool.touch(hit)
        seq.blocks.extend(hit)
        if need > 0:
            seq.blocks.extend(self._pool.allocate(need))
        self._cache_full_blocks(seq, tokens)
        return True

    def _cache_full_blocks(self, seq: _Seq, tokens: int) -> None:
        # Like vLLM, blocks are cached once scheduled: the step that fills them ends before
        # any later lookup. Only prompt blocks have hashes here (the emulator's output text
        # is not what a tokenizer would make of it on the next turn).
        full = min(tokens // self.config.block_size, len(seq.block_hashes))
        if full > seq.cached_blocks:
            self._pool.cache(
                seq.blocks[seq.cached_blocks : full], seq.block_hashes[seq.cached_blocks : full]
            )
            seq.cached_blocks = full

    def _admit(self, seq: _Seq, hit_tokens: int) -> None:
        """First scheduling of a (re)started request: count the lookup as vLLM does."""
        seq.computed = hit_tokens
        if seq.cached_tokens is None:
            seq.cached_tokens = hit_tokens
        if seq.preemptions == 0 and self._pool.enable_caching:
            self.prefix_cache_queries += seq.num_tokens
            self.prefix_cache_hits += hit_tokens
            self._step_queries += seq.num_tokens
            self._step_hits += hit_tokens

    def _free(self, seq: _Seq) -> None:
        self._pool.free(reversed(seq.blocks))  # the tail is evicted first
        seq.blocks = []
        seq.cached_blocks = 0

    def _preempt(self, seq: _Seq) -> None:
        self._free(seq)
        seq.computed = 0
        seq.preemptions += 1
        self.num_preemptions += 1
        self._waiting.appendleft(seq)

    def _finish(self, seq: _Seq, end: float) -> FinishedRequest:
        self._running.remove(seq)
        del self._by_id[seq.req_id]
        self._free(seq)
        assert seq.scheduled_at is not None and seq.first_token_at is not None
        return FinishedRequest(
            req_id=seq.req_id,
            prompt_tokens=seq.prompt_tokens,
            output_tokens=seq.generated,
            finish_reason=seq.finish_reason,
            arrival=seq.arrival,
            scheduled_at=seq.scheduled_at,
            first_token_at=seq.first_token_at,
            finished_at=end,
            num_preemptions=seq.preemptions,
            cached_tokens=seq.cached_tokens or 0,
        )
