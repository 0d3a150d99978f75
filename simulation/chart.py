"""The seed's chart: p99 queue wait against N for each policy, the knee marked, goodput shown.

matplotlib is an optional extra (``pip install -e '.[sim]'``); without it ``draw`` raises
``ChartUnavailable`` and the commands still write their CSV.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from simulation.results import Row

if TYPE_CHECKING:
    from matplotlib.axes import Axes

BACKGROUND = "#2a1631"  # the seed's dark plum
PALETTE = ["#4dd0e1", "#ffc857", "#ff7f6e", "#b39ddb", "#81c784", "#f48fb1", "#e0e0e0"]


class ChartUnavailable(RuntimeError):
    """matplotlib is not installed."""


INSTALL_HINT = "pip install 'sluicegate[sim]' (matplotlib) to draw charts"


def chart_available() -> bool:
    """Whether matplotlib can be imported: a command whose chart is its point asks first,
    not after its runs."""
    import importlib.util

    return importlib.util.find_spec("matplotlib") is not None


def draw(rows: list[Row], path: Path, *, knee_n: float | None, title: str) -> None:
    """Write a PNG: wait curves on the left axis, goodput (dotted) on the right one."""
    with _figure(path) as ax:
        good = ax.twinx()
        for i, policy in enumerate(dict.fromkeys(r.policy for r in rows)):
            mine = sorted((r for r in rows if r.policy == policy), key=lambda r: r.n_agents)
            colour = PALETTE[i % len(PALETTE)]
            ns = [r.n_agents for r in mine]
            ax.plot(ns, [r.p99_queue_wait_s for r in mine], "o-", color=colour, lw=2, label=policy)
            good.plot(ns, [r.goodput_tps for r in mine], ":", color=colour, lw=1, alpha=0.7)
        if knee_n is not None:
            ax.axvline(knee_n, ls="--", color="#cccccc", lw=1)
            label = f"knee N*={knee_n:.1f}: goodput saturates"
            ax.text(knee_n + 0.2, ax.get_ylim()[1] * 0.03, label, color="#cccccc")
        _style(ax, good, title)


def draw_frontier(rows: list[Row], path: Path, *, title: str) -> None:
    """Scatter: p99 queue wait (x) against agent-felt p99 (y), one point per candidate,
    with the goal box (queue wait <= 13 s, felt <= 30 s) shaded."""
    with _figure(path) as ax:
        ax.fill_between([0, 13], 1, 30, color="#81c784", alpha=0.15, lw=0)
        ax.text(0.5, 12, "goal: wait <= 13 s and felt <= 30 s", color="#81c784")
        markers = "osD^vP*Xh"
        for i, r in enumerate(rows):
            note = f"{r.policy}: {r.goodput_tps:.3f}/s, {r.deferral_share:.0%} deferred"
            ax.scatter(
                [r.p99_queue_wait_s],
                [r.p99_felt_wait_s],
                s=70,
                label=note,
                color=PALETTE[i % len(PALETTE)],
                marker=markers[i % len(markers)],
            )
        ax.set_yscale("log")
        ax.set_ylim(10, 400)
        ax.set_xlim(0, None)
        _style(ax, None, title)
        legend = ax.legend(loc="upper right", facecolor=BACKGROUND, edgecolor="#777777", fontsize=8)
        for text in legend.get_texts():
            text.set_color("white")
        ax.set_xlabel("p99 queue wait (s)", color="white")
        ax.set_ylabel("p99 agent-felt wait, first submission to decoding (s, log)", color="white")


@contextlib.contextmanager
def _figure(path: Path) -> Iterator[Axes]:
    """A dark 10x6 figure whose axes the block draws on, written to ``path`` as PNG after it."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ChartUnavailable(INSTALL_HINT) from exc

    fig, ax = plt.subplots(figsize=(10, 6), facecolor=BACKGROUND)
    ax.set_facecolor(BACKGROUND)
    yield ax
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, facecolor=BACKGROUND, bbox_inches="tight")
    plt.close(fig)


def _style(ax: object, good: object | None, title: str) -> None:
    from matplotlib.axes import Axes

    assert isinstance(ax, Axes)
    ax.set_title(title, color="white", fontsize=11)
    ax.set_xlabel("concurrent agents N", color="white")
    ax.set_ylabel("p99 queue wait before decoding (s)", color="white")
    axes = [ax]
    if isinstance(good, Axes):
        good.set_ylabel("goodput, dotted (turns/s)", color="#bbbbbb")
        good.set_ylim(bottom=0)
        ax.set_ylim(bottom=0)
        axes.append(good)
    for axis in axes:
        axis.tick_params(colors="#dddddd")
        for spine in axis.spines.values():
            spine.set_color("#777777")
    ax.grid(color="#ffffff", alpha=0.08)
    if good is None:
        return
    legend = ax.legend(
        loc="upper left", bbox_to_anchor=(0.0, 0.9), facecolor=BACKGROUND, edgecolor="#777777"
    )
    for text in legend.get_texts():
        text.set_color("white")
