"""Plots of a trace report (matplotlib, Agg backend): per-rank stacked breakdown, collective busbw by message
size, straggler skew. Each function writes one PNG and returns its path."""
from __future__ import annotations

import math
import os

from narrowpath.report.figures import pyplot, save_figure
from narrowpath.trace.analyze import TraceReport

_COLORS = {"compute": "#4c72b0", "exposed_comm": "#dd8452", "memcpy": "#55a868", "idle": "#c7c7c7"}
_LABELS = {"compute": "compute", "exposed_comm": "exposed communication", "memcpy": "memcpy / memset (+ sync)",
           "idle": "idle"}


def _plain():
    """Tick labels as plain numbers (0.5, 20, 300) rather than 2×10^1 on log axes."""
    from matplotlib.ticker import FuncFormatter
    return FuncFormatter(lambda v, _: f"{v:g}")


def plot_breakdown(report: TraceReport, path: str) -> str:
    """Stacked bar per rank: compute, exposed comm, memcpy, idle (percent of the device span, HTA window)."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(max(5.0, 0.7 * len(report.ranks) + 3), 4.6))
    labels = [str(r.rank) for r in report.ranks]
    bottom = [0.0] * len(report.ranks)
    for key, color in _COLORS.items():
        vals = [r.breakdown.pct()[key] for r in report.ranks]
        ax.bar(labels, vals, bottom=bottom, color=color, label=_LABELS[key])
        bottom = [b + v for b, v in zip(bottom, vals)]
    for i, r in enumerate(report.ranks):
        ax.text(i, 101, f"{r.breakdown.overlap_pct:.0f}%", ha="center", va="bottom", fontsize=7)
    ax.set_ylim(0, 112)
    ax.set_yticks(range(0, 101, 20))
    ax.set_xlabel("rank (number above a bar: share of its communication overlapped by compute)", fontsize=8)
    ax.set_ylabel("share of device span (%)")
    ax.set_title("Temporal breakdown per rank (HTA window)", fontsize=10)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2, frameon=False)
    return save_figure(fig, path, dpi=110)


def plot_busbw(report: TraceReport, path: str) -> str:
    """Bus bandwidth of each collective against its message size (log-log), one marker per kind."""
    plt = pyplot()
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
        ax.yaxis.set_major_formatter(_plain())
        ax.legend(fontsize=7)
        ax.set_xlabel("message size (bytes, nccl-tests convention)")
        ax.set_ylabel("busbw (GB/s, 1 GB = 1e9 B)")
        ax.set_title("Collective bus bandwidth by message size", fontsize=10)
        ax.grid(True, which="major", alpha=0.3)
    else:  # no sizes (no collective metadata): show what is measurable, the time per call
        samples = [s for r in report.ranks for s in r.samples]
        if samples:
            ax.boxplot([[s.dur_s * 1e3 for s in samples if s.kind == k] for k in kinds],
                       tick_labels=[f"{k} ({sum(s.kind == k for s in samples)})" for k in kinds])
            ax.set_yscale("log")
            ax.yaxis.set_major_formatter(_plain())
            ax.yaxis.set_minor_formatter(_plain())
            ax.set_ylabel("time per call (ms)")
            ax.set_title("Collective time per call (no message sizes in the trace: busbw not derivable)",
                         fontsize=9)
        else:
            ax.text(0.5, 0.5, "no communication kernels in this trace", ha="center", va="center",
                    transform=ax.transAxes)
            ax.set_xticks([])
            ax.set_yticks([])
            ax.set_title("Collective bus bandwidth by message size", fontsize=10)
    return save_figure(fig, path, dpi=110)


def plot_stragglers(report: TraceReport, path: str) -> str:
    """Mean and max lateness of each rank behind the earliest arrival at matched collectives."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(max(5.5, 0.7 * len(report.ranks) + 3), 4))
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
        for i, r in enumerate(s.ranks):
            ax.text(i, s.max_lateness_s[r] * 1e3, f"last at {s.last_arrival_count[r]}/{s.num_matched}",
                    ha="center", va="bottom", fontsize=7)
        ax.set_ylabel("lateness behind earliest rank (ms)")
        ax.margins(y=0.12)
        ax.legend(fontsize=7)
    ax.set_xlabel("rank")
    ax.set_title("Straggler skew at collectives" + (f" ({s.num_matched} matched)" if s is not None else ""),
                 fontsize=10)
    return save_figure(fig, path, dpi=110)


def write_plots(report: TraceReport, directory: str) -> list[str]:
    """All three plots into `directory` (created when missing)."""
    os.makedirs(directory, exist_ok=True)
    return [plot_breakdown(report, os.path.join(directory, "trace_breakdown.png")),
            plot_busbw(report, os.path.join(directory, "trace_busbw.png")),
            plot_stragglers(report, os.path.join(directory, "trace_stragglers.png"))]
