"""``python -m bench.soak.probe serve --config FILE``: ``sluicegate serve`` with a memory
probe, for the soak (``python -m bench.soak --probe``); the product carries none of it.

On SIGUSR1 the process writes ``probe-NNN.json`` into ``$SOAK_PROBE_DIR`` (written aside,
then renamed: a reader sees it whole):

- ``blocks``: ``sys.getallocatedblocks()``, the Python objects' memory blocks alive;
- ``obmalloc``: pymalloc's arenas and its bytes in used and in free blocks;
- ``malloc``: glibc's ``mallinfo2``: heap from the system, bytes in use, bytes free inside it;
- with ``SOAK_MALLOC_TRIM=1``, ``malloc_trim``: the RSS before and after glibc's
  ``malloc_trim(0)`` (which hands the free pages inside its heaps back to the system), so
  the next quiet points show what RSS does when free heap memory is returned;
- with ``SOAK_TRACEMALLOC=FRAMES`` (tracemalloc started before the gateway is built):
  ``gc_collected``, what a full collection found unreachable (garbage the youngest
  generation's threshold had left waiting), ``types``, the objects the collector tracks by
  type name, then ``traced_bytes`` and ``sites``, the traced bytes and blocks by traceback
  (``file:line``,
  oldest frame first, as tracemalloc orders them), for ``python -m bench.soak.growth DIR``
  to compare (pymalloc's accounts are not available while tracemalloc hooks the allocator).
"""

from __future__ import annotations

import asyncio
import ctypes
import gc
import json
import os
import re
import signal
import sys
import tempfile
import time
import tracemalloc
from collections import Counter
from pathlib import Path
from types import FrameType
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

DIR_ENV = "SOAK_PROBE_DIR"
FRAMES_ENV = "SOAK_TRACEMALLOC"
TRIM_ENV = "SOAK_MALLOC_TRIM"


class _MallInfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",
            "keepcost",
        )
    ]


def malloc_info() -> dict[str, int]:
    """glibc's heap: ``arena`` (non-mmapped bytes from the system), ``in_use`` (bytes in
    allocated chunks), ``free`` (bytes in free chunks), ``mmapped`` (big blocks); empty
    off glibc or when malloc is not glibc's."""
    try:
        libc = ctypes.CDLL(None)
        fn = libc.mallinfo2
    except (OSError, AttributeError):
        return {}
    fn.restype = _MallInfo2
    m = fn()
    return {"arena": m.arena, "in_use": m.uordblks, "free": m.fordblks, "mmapped": m.hblkhd}


_OBMALLOC = {
    "arenas": re.compile(rb"# arenas allocated current\s*=\s*([\d,]+)"),
    "used_bytes": re.compile(rb"# bytes in allocated blocks\s*=\s*([\d,]+)"),
    "free_bytes": re.compile(rb"# bytes in available blocks\s*=\s*([\d,]+)"),
    "unused_pool_bytes": re.compile(rb"\d+ unused pools \* \d+ bytes\s*=\s*([\d,]+)"),
}


def rss_bytes() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def malloc_trim() -> dict[str, int]:
    """glibc's ``malloc_trim(0)``: the free pages inside its heaps handed back; the RSS
    before and after (what of the RSS was free heap memory)."""
    before = rss_bytes()
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):
        return {}
    return {"rss_before_trim": before, "rss_after_trim": rss_bytes()}


def obmalloc_info() -> dict[str, int]:
    """pymalloc's own accounts (``sys._debugmallocstats`` writes them to fd 2)."""
    with tempfile.TemporaryFile() as out:
        saved = os.dup(2)
        sys.stderr.flush()
        os.dup2(out.fileno(), 2)
        try:
            sys._debugmallocstats()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        out.seek(0)
        text = out.read()
    found = {k: rx.search(text) for k, rx in _OBMALLOC.items()}
    return {k: int(m.group(1).replace(b",", b"")) for k, m in found.items() if m}


def sites(frames_limit: int) -> list[tuple[list[str], int, int]]:
    """Traced bytes and blocks by traceback, the probe's own allocations left out."""
    snap = tracemalloc.take_snapshot().filter_traces(
        [tracemalloc.Filter(False, tracemalloc.__file__), tracemalloc.Filter(False, __file__)]
    )
    out = []
    for stat in snap.statistics("traceback"):
        where = [f"{f.filename}:{f.lineno}" for f in stat.traceback][:frames_limit]
        out.append((where, stat.size, stat.count))
    return out


def probe() -> dict[str, Any]:
    """The allocators' accounts; while tracing, also a full collection, the objects by
    type and the traced sites (without tracing the probe allocates next to nothing, so a
    soak that measures RSS is not disturbed by it)."""
    row: dict[str, Any] = {
        "time": time.time(),
        "blocks": sys.getallocatedblocks(),
        "obmalloc": obmalloc_info(),
        "malloc": malloc_info(),
    }
    if os.environ.get(TRIM_ENV) == "1":
        row["malloc_trim"] = malloc_trim()
    if tracemalloc.is_tracing():
        row["gc_collected"] = gc.collect()
        row["types"] = dict(Counter(type(o).__name__ for o in gc.get_objects()))
        row["traced_bytes"] = tracemalloc.get_traced_memory()[0]
        row["sites"] = sites(tracemalloc.get_traceback_limit())
    return row


def write(directory: Path, n: int) -> Path:
    path = directory / f"probe-{n:03d}.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(probe()))
    tmp.replace(path)
    return path


def install(directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    taken = [0]

    def on_signal(_sig: int, _frame: FrameType | None) -> None:
        write(directory, taken[0])
        taken[0] += 1

    signal.signal(signal.SIGUSR1, on_signal)


async def take(pid: int, directory: Path, n: int, timeout_s: float = 120.0) -> dict[str, Any]:
    """Ask the gateway (``pid``) for its ``n``-th probe and read it once written."""
    path = directory / f"probe-{n:03d}.json"
    os.kill(pid, signal.SIGUSR1)
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"no {path.name} after {timeout_s:g} s")
        await asyncio.sleep(0.1)
    row: dict[str, Any] = json.loads(path.read_text())
    return row


def main(argv: list[str]) -> int:
    frames = int(os.environ.get(FRAMES_ENV, "0"))
    if frames > 0:
        tracemalloc.start(frames)
    install(Path(os.environ[DIR_ENV]))
    from commands.cli import main as cli

    return cli(argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
