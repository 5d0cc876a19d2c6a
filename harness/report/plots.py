"""Plots for the HTML report, drawn by matplotlib (Agg, no display) as base64 PNG for
pytest-html's image extras.

One figure per scenario run: Rss, Anonymous and dma-buf (MiB) over the steps, live QNN
contexts on a second axis, and the failing step(s) shaded red.
"""

from __future__ import annotations

import base64
import io
import math

import matplotlib

matplotlib.use("Agg")  # before anything draws: no display on CI hosts or farms

from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

DPI = 72
MAX_LABELS = 24  # more steps than this: every k-th step is labelled


def scenario_plot(run: dict, failing_steps: set[int]) -> str:
    """The run's memory and live contexts per step, as a base64 PNG."""
    steps = run["steps"]
    x = list(range(len(steps)))

    def series(key: str, scale: float) -> list[float]:
        out = []
        for s in steps:
            value = (s.get("memory") or {}).get(key)
            out.append(value / scale if isinstance(value, (int, float)) else math.nan)
        return out

    fig = Figure(figsize=(10, 3.8), dpi=DPI)
    ax = fig.add_subplot(1, 1, 1)
    lines = [series("rss_kb", 1024), series("anonymous_kb", 1024), series("dmabuf_bytes", 2**20)]
    labels = ["Rss", "Anonymous", "dma-buf"]
    dsp = series("dsp_heap_bytes", 2**20)
    if not all(math.isnan(v) for v in dsp):  # phones only: the simulator has no DSP heap
        lines.append(dsp)
        labels.append("DSP heap")
    for values, label in zip(lines, labels):
        ax.plot(x, values, marker="o", ms=3, label=label)
    ax.set_ylabel("MiB")
    top = max([v for values in lines for v in values if not math.isnan(v)] + [1.0])
    ax.set_ylim(0, top * 1.3)  # headroom for the legend
    ax.grid(True, alpha=0.3)
    contexts = ax.twinx()
    contexts.step(x, [s["live"].get("context", 0) for s in steps], where="mid",
                  color="tab:purple", lw=1.5, label="live QNN contexts")
    contexts.set_ylabel("live contexts")
    contexts.set_ylim(0, 1.3 * (max([s["live"].get("context", 0) for s in steps] + [1]) + 0.2))
    contexts.yaxis.set_major_locator(MaxNLocator(integer=True))
    for i in sorted(failing_steps):
        if 0 <= i < len(steps):
            ax.axvspan(i - 0.5, i + 0.5, color="tab:red", alpha=0.18, lw=0)
            ax.annotate(steps[i]["status"], (i, 0.97), xycoords=("data", "axes fraction"),
                        ha="center", va="top", color="tab:red", fontsize=8)
    every = max(1, math.ceil(len(steps) / MAX_LABELS))
    ax.set_xticks(x[::every])
    ax.set_xticklabels([f"{i}: {_short(steps[i]['target'])}" for i in x[::every]],
                       rotation=35, ha="right", fontsize=7)
    ax.set_xlim(-0.6, len(steps) - 0.4)
    handles = ax.get_legend_handles_labels()
    extra = contexts.get_legend_handles_labels()
    ax.legend(handles[0] + extra[0], handles[1] + extra[1], loc="upper left", fontsize=7,
              ncols=4, framealpha=0.8)
    title = f"{run['scenario']} (run {run['index']})"
    if failing_steps:
        title += f": failing step {', '.join(map(str, sorted(failing_steps)))} shaded"
    ax.set_title(title, fontsize=9, loc="left")
    # Fixed margins (room for the rotated step labels): tight_layout costs more than drawing.
    fig.subplots_adjust(left=0.06, right=0.94, top=0.9, bottom=0.3)
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _short(text: str, limit: int = 28) -> str:
    return text if len(text) <= limit else text[:limit - 1] + "…"
