"""Are refusals synchronised? 100 requests at one instant, and the Retry-After of each one
refused. The admitted ones are released at once, unserved, and the queued ones withdrawn,
so the probe leaves no work behind."""

from __future__ import annotations

from policies.backends import BackendsSnapshot
from policies.engine.scheduler import Scheduler, Ticket
from policies.types import DecisionKind, Ending, Outcome, RequestInfo, Usage, WorkEstimate

PROBE_REQUESTS = 100


def probe(
    scheduler: Scheduler,
    fleet: BackendsSnapshot,
    *,
    tenant: str,
    model: str,
    prompt_tokens: int,
    output_tokens: int,
    now: float,
) -> list[float]:
    """The Retry-After values (ms resolution, as the header carries them) of the refused."""
    values: list[float] = []
    for i in range(PROBE_REQUESTS):
        info = RequestInfo(
            request_id=f"probe-{i}",
            tenant=tenant,
            workload_class="interactive",
            model=model,
            estimate=WorkEstimate(prompt_tokens, output_tokens),
            arrival=now,
            max_tokens=output_tokens,
            stream=True,
        )
        out = scheduler.submit(info, fleet)
        if isinstance(out, Ticket):
            scheduler.release(out, Ending(Outcome.CANCELLED, Usage(0, 0)))
        elif out.decision is DecisionKind.REJECT:
            if out.retry_after_s is not None:
                values.append(round(out.retry_after_s, 3))
        else:
            scheduler.cancel(out.request_id)
    return values
