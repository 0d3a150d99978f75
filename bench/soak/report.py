"""The soak's summary and verdict.

Flat means: over the quiet points of the second half of the run (the first half is the
warm-up), the fitted RSS growth is under ``RSS_TOLERANCE`` of the gateway's RSS at rest
(allocator arenas and caches move by a few hundred KiB from one quiet point to the next), and
the fitted growth of open file descriptors is under one descriptor: at rest, after the
keep-alive timeout, the count is exact, so one leaked socket in N requests shows as a climb.
"""

from __future__ import annotations

from collections import Counter

from bench.soak.run import Report

RSS_TOLERANCE = 0.02
FD_TOLERANCE = 1.0


def verdict(report: Report) -> list[str]:
    """Every failed check: the books, then the footprint."""
    out = list(report.problems)
    if len(report.quiet) < 5:
        return [*out, "too short: fewer than four rounds"]
    t = report.steady()
    if t.rss_growth_mib > RSS_TOLERANCE * t.rss_first_mib:
        out.append(f"RSS grows: {t.rss_growth_mib:+.2f} MiB over {t.window_s / 60:.1f} min")
    if t.fds_growth >= FD_TOLERANCE:
        out.append(f"open fds grow: {t.fds_growth:+.1f} over {t.window_s / 60:.1f} min")
    return out


def render(report: Report) -> str:
    tally = report.tally
    by_status: Counter[str] = Counter()
    for (_kind, what), n in tally.seen.items():
        by_status[what] += n
    lines = [
        f"requests: {tally.scheduled + tally.refused} "
        f"({', '.join(f'{k}: {v}' for k, v in sorted(by_status.items()))})",
        f"config reloads written: {report.writes[0]} valid, {report.writes[1]} invalid",
        f"gateway at rest: before any traffic RSS {report.quiet[0].rss_bytes / 2**20:.1f} MiB, "
        f"{report.quiet[0].fds} fds; after each round: "
        + ", ".join(f"{s.rss_bytes / 2**20:.1f}/{s.fds}" for s in report.quiet[1:])
        + " (MiB/fds)",
    ]
    if len(report.quiet) >= 5:
        t = report.steady()
        peak = max(report.loaded, key=lambda s: s.rss_bytes, default=report.quiet[-1])
        lines += [
            f"gateway at rest, over the second half ({t.window_s / 60:.1f} min): RSS "
            f"{t.rss_first_mib:.1f} -> {t.rss_last_mib:.1f} MiB (slope "
            f"{t.rss_mib_per_hour:+.2f} MiB/h, fitted {t.rss_growth_mib:+.2f} MiB), fds "
            f"{t.fds_first} -> {t.fds_last} (slope {t.fds_per_hour:+.2f}/h)",
            f"under load: peak RSS {peak.rss_bytes / 2**20:.1f} MiB, peak fds "
            f"{max((s.fds for s in report.loaded), default=0)}",
        ]
    failed = verdict(report)
    lines += [f"FAIL: {p}" for p in failed] or ["PASS: the books add up and the footprint is flat"]
    return "\n".join(lines)
