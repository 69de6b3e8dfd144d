"""Pictures of a memory plan: a text timeline and a PNG.

Both put execution steps across and the arena's bytes (offsets) on the other axis, so a
tensor is a bar from its first to its last step; bars at the same height never meet. The
text form is modelled on TFLite Micro's ``PrintMemoryPlan``. The PNG is drawn with
matplotlib's Agg canvas without touching pyplot's global state, so it is safe in servers
and threads; matplotlib is imported only when a PNG is asked for.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from static_runtime.memory.planner import align, format_bytes, peak

if TYPE_CHECKING:
    from static_runtime.memory.planner import MemoryPlan, Placement

_LIVE, _DEAD = "#", "."
_MAX_NAME = 24


def _clip(name: str, width: int) -> str:
    return name if len(name) <= width else name[: width - 1] + "~"


def _ruler(first: int, steps_per_col: float, cols: int, last: int) -> str:
    """Step numbers above the bar columns, at a round interval that leaves room for them."""
    room = len(str(last)) + 1
    tick = next(t for t in (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10**4, 10**5,
                            10**6, 10**9) if t / steps_per_col >= room)
    chars = [" "] * cols
    for step in range((first + tick - 1) // tick * tick, last + 1, tick):
        col = int((step - first) / steps_per_col)
        label = str(step)
        if col + len(label) <= cols:
            chars[col:col + len(label)] = label
    return "".join(chars)


def render_timeline(plan: MemoryPlan, width: int = 80) -> str:
    """The plan as text: its summary, then one row per tensor sorted by offset, showing the
    offset and aligned size in bytes, the storage group (if any), the name, and a bar that is
    ``#`` at the steps the tensor is live. When there are more steps than columns, a column
    stands for several steps and is ``#`` if the tensor is live at any of them."""
    lines = [plan.summary()]
    rows = sorted(plan.placements, key=lambda p: (p.offset, p.request.start, p.name))
    if not rows:
        lines.append("(no tensors)")
        return "\n".join(lines)

    first = min(p.request.start for p in rows)
    last = max(p.request.end for p in rows)
    nsteps = last - first + 1
    has_groups = any(p.group is not None for p in rows)
    a = plan.alignment
    off_w = max(len("offset"), len(str(max(p.offset for p in rows))))
    size_w = max(len("size"), len(str(max(align(p.request.size, a) for p in rows))))
    grp_w = max(len("group"), len(str(max((p.group or 0) for p in rows)))) if has_groups else 0
    name_w = max(len("name"), min(_MAX_NAME, max(len(p.name) for p in rows)))

    def prefix(offset: str, size: str, group: str, name: str) -> str:
        cells = [offset.rjust(off_w), size.rjust(size_w)]
        if has_groups:
            cells.append(group.rjust(grp_w))
        cells.append(name.ljust(name_w))
        return " ".join(cells) + " |"

    cols = max(10, width - len(prefix("", "", "", "")) - 1)
    cols = min(cols, nsteps)
    steps_per_col = nsteps / cols

    def bar(p: Placement) -> str:
        chars = []
        for c in range(cols):
            lo = first + int(c * steps_per_col)
            hi = first + int((c + 1) * steps_per_col) - 1
            chars.append(_LIVE if p.request.start <= hi and lo <= p.request.end else _DEAD)
        return "".join(chars)

    lines.append(prefix("", "", "", "step") + _ruler(first, steps_per_col, cols, last) + "|")
    lines.append(prefix("offset", "size", "group", "name") + "-" * cols + "|")
    for p in rows:
        group = "" if p.group is None else str(p.group)
        lines.append(prefix(str(p.offset), str(align(p.request.size, a)), group,
                            _clip(p.name, name_w)) + bar(p) + "|")
    peak_bytes, peak_step = peak((p.request for p in rows), a)
    scale = "1 step" if cols == nsteps else f"{steps_per_col:.2f} steps"
    lines.append(f"bytes aligned to {a}; one column = {scale}; "
                 f"peak {format_bytes(peak_bytes)} live at step {peak_step}")
    return "\n".join(lines)


def _unit(nbytes: int) -> tuple[int, str]:
    for scale, unit in ((1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")):
        if nbytes >= scale:
            return scale, unit
    return 1, "bytes"


def plot_memory_plan(plan: MemoryPlan, path: str | Path) -> None:
    """Save the plan as a PNG at ``path``: execution step across, arena offset up, one
    rectangle per tensor from (start, offset) to (end + 1, offset + aligned size), named when
    the name fits inside; colours by storage group when the plan has groups; a dashed line at
    the lower bound and a solid one at the arena size."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.colors import to_rgba
    from matplotlib.figure import Figure
    from matplotlib.patches import Rectangle
    from matplotlib.ticker import MaxNLocator

    a = plan.alignment
    placements = plan.placements
    top = max(plan.arena_bytes, plan.lower_bound_bytes)
    scale, unit = _unit(top)
    first = min((p.request.start for p in placements), default=0)
    last = max((p.request.end for p in placements), default=0)

    fig = Figure(figsize=(11, 6.5), dpi=110, layout="constrained")
    canvas = FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    palette = _palette()
    rects = []
    by_size = sorted(range(len(placements)),
                     key=lambda i: -align(placements[i].request.size, a))
    colour_index = {i: n for n, i in enumerate(by_size)}
    for i, p in enumerate(placements):
        r = p.request
        height = align(r.size, a) / scale
        key = p.group if p.group is not None else colour_index[i]
        rect = Rectangle((r.start, p.offset / scale), r.end + 1 - r.start, height,
                         facecolor=to_rgba(palette[key % len(palette)], 0.85),
                         edgecolor="black", linewidth=0.6)
        ax.add_patch(rect)
        rects.append((rect, p))

    ax.axhline(plan.arena_bytes / scale, color="black", linestyle="-", linewidth=1.0,
               label=f"arena {format_bytes(plan.arena_bytes)}", zorder=3)
    ax.axhline(plan.lower_bound_bytes / scale, color="crimson", linestyle="--", linewidth=1.5,
               label=f"lower bound {format_bytes(plan.lower_bound_bytes)}", zorder=4)
    ax.set_xlim(first, last + 1)
    ax.set_ylim(0, top / scale * 1.06 if top else 1.0)
    # Step k is the column [k, k + 1): label it at its middle, mark the borders as minor ticks.
    steps = [int(t) for t in MaxNLocator(nbins=12, integer=True).tick_values(first, last)
             if first <= t <= last]
    ax.set_xticks([k + 0.5 for k in steps], [str(k) for k in steps])
    if last - first < 200:
        ax.set_xticks(range(first, last + 2), minor=True)
    ax.set_xlabel("execution step (node index); a tensor spans the steps from its first to its last use")
    ax.set_ylabel(f"arena offset ({unit})")
    groups = len({p.group for p in placements if p.group is not None})
    detail = f", {groups} storage groups" if groups else ""
    ax.set_title(f"Memory plan ({plan.algorithm}, {len(placements)} tensors{detail}): "
                 f"arena {format_bytes(plan.arena_bytes)} vs lower bound "
                 f"{format_bytes(plan.lower_bound_bytes)} ({plan.ratio:.2f}x)")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)

    if not placements:
        ax.text(0.5, 0.5, "no managed tensors", transform=ax.transAxes, ha="center",
                va="center", color="grey")

    # Label only the rectangles the name actually fits in, measured after layout.
    renderer = canvas.get_renderer()
    fig.draw_without_rendering()
    for rect, p in rects:
        if not p.request.size:
            continue
        box = rect.get_window_extent(renderer)
        x, y = rect.get_x() + rect.get_width() / 2, rect.get_y() + rect.get_height() / 2
        text = ax.text(x, y, p.name, ha="center", va="center", fontsize=8, clip_on=True)
        extent = text.get_window_extent(renderer)
        if extent.width > box.width - 2 or extent.height > box.height - 1:
            text.remove()
    fig.savefig(path, format="png")


def _palette() -> list[tuple[float, ...]]:
    """tab20's strong colours, then its light ones, so neighbours in the cycle differ."""
    from matplotlib import colormaps

    colours = list(colormaps["tab20"].colors)
    return colours[0::2] + colours[1::2]
