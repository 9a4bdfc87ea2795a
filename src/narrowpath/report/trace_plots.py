"""Plots of a trace report (matplotlib, Agg backend): per-rank stacked breakdown, collective busbw by message
size, straggler skew. Each function writes one PNG and returns its path."""
from __future__ import annotations

import math
import os

from narrowpath.errors import NarrowpathError
from narrowpath.trace.analyze import TraceReport

_COLORS = {"compute": "#4c72b0", "exposed_comm": "#dd8452", "memcpy": "#55a868", "other": "#8172b3",
           "idle": "#c7c7c7"}


def _plt():
    try:
        import matplotlib
    except ImportError:
        raise NarrowpathError("--plots needs matplotlib: pip install 'narrowpath[plots]'") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def plot_breakdown(report: TraceReport, path: str) -> str:
    """Stacked bar per rank: compute, exposed comm, memcpy, other, idle (percent of the span)."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(max(4.0, 0.6 * len(report.ranks) + 2), 4))
    labels = [str(r.rank) for r in report.ranks]
    bottom = [0.0] * len(report.ranks)
    for key, color in _COLORS.items():
        vals = [r.breakdown.pct()[key] for r in report.ranks]
        ax.bar(labels, vals, bottom=bottom, color=color, label=key.replace("_", " "))
        bottom = [b + v for b, v in zip(bottom, vals)]
    for i, r in enumerate(report.ranks):
        ax.text(i, 101, f"ovl {r.breakdown.overlap_pct:.0f}%", ha="center", va="bottom", fontsize=7)
    ax.set_ylim(0, 110)
    ax.set_xlabel("rank")
    ax.set_ylabel("share of trace span (%)")
    ax.set_title("Temporal breakdown per rank")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_busbw(report: TraceReport, path: str) -> str:
    """Bus bandwidth of each collective against its message size (log-log), one marker per kind."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 4))
    plotted = 0
    kinds = sorted({s.kind for r in report.ranks for s in r.samples})
    for kind in kinds:
        pts = [(s.message_bytes, s.busbw_bytes_per_s / 1e9) for r in report.ranks for s in r.samples
               if s.kind == kind and math.isfinite(s.busbw_bytes_per_s) and s.message_bytes > 0]
        if pts:
            ax.scatter([p[0] for p in pts], [p[1] for p in pts], s=14, label=f"{kind} ({len(pts)})", alpha=0.7)
            plotted += len(pts)
    if plotted:
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.legend(fontsize=7)
    else:
        ax.text(0.5, 0.5, "no collective with a known message size in this trace", ha="center", va="center",
                transform=ax.transAxes)
        ax.set_xticks([])
        ax.set_yticks([])
    ax.set_xlabel("message size (bytes)")
    ax.set_ylabel("busbw (GB/s)")
    ax.set_title("Collective bus bandwidth by message size")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_stragglers(report: TraceReport, path: str) -> str:
    """Mean and max lateness of each rank behind the earliest arrival at matched collectives."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(max(4.0, 0.6 * len(report.ranks) + 2), 4))
    s = report.stragglers
    if s is None:
        ax.text(0.5, 0.5, "needs two or more ranks with matching collectives", ha="center", va="center",
                transform=ax.transAxes)
        ax.set_xticks([])
        ax.set_yticks([])
    else:
        labels = [str(r) for r in s.ranks]
        ax.bar(labels, [s.max_lateness_s[r] * 1e3 for r in s.ranks], color="#f0b27a", label="max lateness")
        ax.bar(labels, [s.mean_lateness_s[r] * 1e3 for r in s.ranks], color="#c0392b", width=0.5,
               label="mean lateness")
        ax.set_ylabel("lateness behind earliest rank (ms)")
        ax.legend(fontsize=7)
    ax.set_xlabel("rank")
    ax.set_title("Straggler skew at collectives")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_plots(report: TraceReport, directory: str) -> list[str]:
    """All three plots into `directory` (created when missing)."""
    os.makedirs(directory, exist_ok=True)
    return [plot_breakdown(report, os.path.join(directory, "trace_breakdown.png")),
            plot_busbw(report, os.path.join(directory, "trace_busbw.png")),
            plot_stragglers(report, os.path.join(directory, "trace_stragglers.png"))]
