"""Profile one proxy setup under wrk load with py-spy; print where its CPU goes.

    python -m bench.hotpath.profile [--setup sluicegate] [--mode non-stream] [--conns 64]

Writes the raw folded stacks (and an SVG flame graph) next to the printout, in --out.
Self time is by function; inclusive time by the gateway's own functions (``gateway/``,
``policies/``) and by library entry points, so "what dominates" is one glance.
"""

from __future__ import annotations

import argparse
import subprocess
import tempfile
import threading
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from bench.hotpath.loadgen import run_wrk
from bench.hotpath.procs import fake_backend, wait_http
from bench.hotpath.setups import MODEL, SETUP_CLASSES
from scripts.vllm.serve import free_port


def profile_args(
    description: str, setups: Sequence[str], default: str, rate: int, out: str
) -> argparse.ArgumentParser:
    """The options of a py-spy profile under wrk: which setup, the load, the sampling, where
    the profile goes (``out`` under the temporary folder)."""
    p = argparse.ArgumentParser(description=description.splitlines()[0])
    p.add_argument("--setup", default=default, choices=sorted(setups))
    p.add_argument("--mode", default="non-stream", choices=("non-stream", "stream"))
    p.add_argument("--conns", type=int, default=64)
    p.add_argument("--duration", type=float, default=8.0)
    p.add_argument("--rate", type=int, default=rate, help="py-spy samples per second")
    p.add_argument("--top", type=int, default=30)
    p.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / out)
    return p


def _args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = profile_args(__doc__, SETUP_CLASSES, "sluicegate", 250, "hotpath-profile")
    return p.parse_args(argv)


def python_pid(leader: int) -> int:
    """The process doing the work: the group's last python process (uvicorn's server, the
    picker)."""
    out = subprocess.run(["pgrep", "-g", str(leader)], capture_output=True, text=True)
    pids = [int(p) for p in out.stdout.split()]
    return pids[-1] if pids else leader


def record_under_load(
    url: str,
    keys: Sequence[str],
    pid_of: Callable[[], int],
    folded: Path,
    *,
    conns: int,
    duration: float,
    stream: bool,
    rate: int,
    native: bool = False,
) -> None:
    """Warm ``url`` up with wrk for a second, then load it for ``duration`` seconds while
    py-spy samples the process ``pid_of()`` names into ``folded`` (raw folded stacks)."""
    run_wrk(url, conns=conns, duration_s=1, stream=stream, keys=keys, model=MODEL)
    pid = pid_of()
    load = threading.Thread(
        target=run_wrk,
        args=(url,),
        kwargs=dict(conns=conns, duration_s=duration, stream=stream, keys=keys, model=MODEL),
    )
    load.start()
    spy = ["py-spy", "record", "--pid", str(pid), "--rate", str(rate)]
    spy += ["--duration", str(int(duration) - 2), "--nonblocking"]
    spy += ["--native"] if native else []
    try:
        subprocess.run(
            [*spy, "--format", "raw", "--output", str(folded)], check=True, capture_output=True
        )
    finally:
        load.join()


def folded_stacks(folded: Path) -> Iterator[tuple[str, int]]:
    """(stack, samples) of each line of a folded-stacks file (py-spy ``--format raw``)."""
    for line in folded.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        yield stack, int(count)


def summarize(folded: Path, top: int) -> str:
    self_time: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    total = 0
    for stack, n in folded_stacks(folded):
        total += n
        frames = stack.split(";")
        self_time[frames[-1]] += n
        for frame in set(frames):
            inclusive[frame] += n
    if not total:
        return "no samples"
    lines = [f"{total} samples", "", "self time:"]
    lines += [f"  {100 * n / total:5.1f}%  {f}" for f, n in self_time.most_common(top)]
    lines += ["", "inclusive, gateway/ and policies/ frames:"]
    ours = [(f, n) for f, n in inclusive.most_common() if "gateway/" in f or "policies/" in f]
    lines += [f"  {100 * n / total:5.1f}%  {f}" for f, n in ours[:top]]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    args = _args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    backend, port = fake_backend(args.out)
    backend.start()
    setup = SETUP_CLASSES[args.setup](args.setup, port, free_port(), args.out)
    folded = args.out / f"{args.setup}-{args.mode}-c{args.conns}.folded"
    try:
        wait_http(backend, "127.0.0.1", port)
        setup.start()
        record_under_load(
            setup.url,
            setup.keys,
            lambda: python_pid(setup.pids()[0]),
            folded,
            conns=args.conns,
            duration=args.duration,
            stream=args.mode == "stream",
            rate=args.rate,
        )
    finally:
        setup.stop()
        backend.stop()
    print(summarize(folded, args.top))
    print(f"\nfolded stacks: {folded}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
