"""Charts the commands draw (matplotlib, Agg backend: no display needed)."""

from __future__ import annotations

import textwrap
from pathlib import Path

#: Colour per implementation tier (``Tier`` values), and for kinds whose nodes have several.
TIER_COLOURS = {"out variant": "#2a9d8f", "native": "#e9c46a", "fallback": "#e76f51",
                "control flow": "#8d99ae", "mixed": "#9b5de5"}
CHART_SIZE_INCHES = (10.0, 6.0)
CHART_DPI = 100
MAX_BARS = 20


def node_kind_chart(path: str | Path, rows: list[tuple[str, float, float, int, str]],
                    title: str, subtitle: str) -> None:
    """A horizontal bar chart of time per node kind, slowest at the top, coloured by tier.

    ``rows``: ``(kind, µs per call, percent, node count, tier)``. More than ``MAX_BARS``
    kinds: the rest are summed into one bar. The PNG is ``CHART_SIZE_INCHES`` at
    ``CHART_DPI`` (1000 × 600 pixels) whatever the number of kinds."""
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    rows = sorted(rows, key=lambda r: -r[1])
    if len(rows) > MAX_BARS:
        rest = rows[MAX_BARS - 1:]
        rows = rows[:MAX_BARS - 1] + [(f"{len(rest)} other kinds", sum(r[1] for r in rest),
                                       sum(r[2] for r in rest), sum(r[3] for r in rest),
                                       "mixed")]
    fig = Figure(figsize=CHART_SIZE_INCHES, dpi=CHART_DPI, layout="constrained")
    ax = fig.add_subplot()
    labels = [f"{kind} ×{n}" for kind, _, _, n, _ in rows]
    values = [us for _, us, _, _, _ in rows]
    colours = [TIER_COLOURS.get(tier, TIER_COLOURS["mixed"]) for *_, tier in rows]
    ypos = list(range(len(rows)))[::-1]
    bars = ax.barh(ypos, values, color=colours, edgecolor="black", linewidth=0.5)
    ax.set_yticks(ypos, labels, fontsize=9)
    top = max(values, default=1.0) or 1.0
    ax.set_xlim(0, top * 1.18)
    for bar, (_, us, pct, _, _) in zip(bars, rows):
        ax.text(bar.get_width() + top * 0.01, bar.get_y() + bar.get_height() / 2,
                f"{us:.1f} µs  {pct:.1f}%", va="center", fontsize=8)
    ax.set_xlabel("time per call (µs, mean over the profiled runs; a node kind's nodes summed)")
    ax.set_ylabel("node kind × number of nodes")
    ax.set_title("\n".join([title, *textwrap.wrap(subtitle, 120)]), fontsize=10)
    ax.grid(axis="x", linestyle=":", alpha=0.6)
    ax.set_axisbelow(True)
    used = list(dict.fromkeys(tier for *_, tier in rows))
    ax.legend(handles=[Patch(color=TIER_COLOURS.get(t, TIER_COLOURS["mixed"]), label=t)
                       for t in used], title="implementation", loc="lower right", fontsize=8)
    fig.savefig(path, format="png")
