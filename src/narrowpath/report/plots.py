"""PNG plots of an Analysis (matplotlib, Agg backend): roofline, step breakdown, scaling, memory per rank, ledger.

Plotting lives only here (STYLE.md §11). Each function takes the Analysis and an output path and returns it.
"""
from __future__ import annotations

from pathlib import Path

from narrowpath.analysis import Analysis
from narrowpath.report.figures import pyplot, save_figure
from narrowpath.report.prediction import breakdown_label, rank_label
from narrowpath.schedule.step import BREAKDOWN_KEYS


LEVEL_COLORS = {"sram": "#2ca02c", "l2": "#ff7f0e", "hbm": "#1f77b4", "host": "#7f7f7f"}
KIND_MARKERS = {"matrix": "o", "flash": "D", "vector": "^"}


def plot_roofline(a: Analysis, path: Path) -> Path:
    """Hierarchical roofline (Yang, Kurth & Williams, 'Hierarchical Roofline analysis for GPUs', CCPE 2020): each op
    of the critical stage appears once per memory level, at its intensity against the bytes it moves *at that level*
    (analysis.ledger.op_level_bytes), under that level's roof; ridge point = peak FLOP/s / level bandwidth."""
    import numpy as np

    from narrowpath.analysis.ledger import op_level_bytes
    plt = pyplot()
    dev = a.prediction.scenario.system.device
    prec = a.prediction.scenario.plan.precision
    peak = dev.matrix_peak(prec)
    fig, ax = plt.subplots(figsize=(9, 6))
    pts = [r for r in a.context.ops if r.op.flop > 0 and r.time_each_s > 0]
    ledger = {r.level: r for r in a.data_movement}
    levels = [lv for lv in dev.levels if ledger.get(lv.name) is not None and ledger[lv.name].bytes_per_step > 0]
    xs = [r.op.flop / op_level_bytes(r.op, lv.name, dev) for r in pts for lv in levels
          if op_level_bytes(r.op, lv.name, dev) > 0]
    ridges = [peak / lv.bw_bytes_per_s for lv in levels]
    lo = min(xs + ridges) / 4
    hi = max(xs + ridges) * 4
    x = np.logspace(np.log10(lo), np.log10(hi), 200)
    tmax = max((r.total_s for r in pts), default=1.0) or 1.0
    # farthest level first, nearer ones smaller and on top: where an op moves the same bytes at several levels
    # (bandwidth-bound GEMMs) its points coincide and show as concentric rings
    for j, lv in reversed(list(enumerate(levels))):
        c = LEVEL_COLORS.get(lv.name, "black")
        size = 0.35 + 0.65 * j / max(1, len(levels) - 1)
        bw = lv.bw_bytes_per_s
        ridge = peak / bw
        ax.plot(x, np.minimum(peak, bw * x) / 1e12, "-", color=c, lw=1.4,
                label=f"{lv.name} roof: {bw / 1e12:.3g} TB/s, ridge {ridge:.0f} FLOP/B")
        ax.plot([ridge], [peak / 1e12], "o", color=c, mec="black", ms=6, zorder=4)
        ax.annotate(f"{lv.name} ridge\n{ridge:.0f} FLOP/B", (ridge, peak / 1e12), textcoords="offset points",
                    xytext=(-10, 8 + 18 * (j % 2)), fontsize=7, color=c, ha="right")
        for kind, mk in KIND_MARKERS.items():
            sel = [(r.op.flop / op_level_bytes(r.op, lv.name, dev), r.op.flop / r.time_each_s / 1e12, r.total_s)
                   for r in pts if r.op.kind == kind and op_level_bytes(r.op, lv.name, dev) > 0]
            if sel:
                ax.scatter([q[0] for q in sel], [q[1] for q in sel], s=[size * (12 + 180 * q[2] / tmax) for q in sel],
                           marker=mk, color=c, alpha=0.6, edgecolors="black", linewidths=0.3, zorder=3)
    for kind, mk in KIND_MARKERS.items():
        if any(r.op.kind == kind for r in pts):
            ax.scatter([], [], marker=mk, color="white", edgecolors="black", label=f"{kind} ops (area ∝ time per step)")
    ax.axhline(peak / 1e12, color="black", lw=0.8)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_xlabel("arithmetic intensity (FLOP per byte moved at that level, log scale)")
    ax.set_ylabel("attained TFLOP/s per GPU (log scale)")
    ys = [r.op.flop / r.time_each_s / 1e12 for r in pts]
    ax.set_ylim(max(peak / 1e12 / 1e3, min(ys + [peak / 1e12]) / 20), peak / 1e12 * 3)
    absent = [lv.name for lv in dev.levels if lv not in levels]
    note = f"; no traffic at {', '.join(absent)}" if absent else ""
    ax.set_title(f"Hierarchical roofline — {dev.name}, {prec} peak {peak / 1e12:.0f} TFLOP/s\n"
                 f"each op of the critical stage once per level (colour){note}; element-wise ops carry no FLOPs",
                 fontsize=9)
    ax.legend(fontsize=7, loc="lower right")
    ax.grid(True, which="both", alpha=0.2)
    return save_figure(fig, path, dpi=110)


def plot_breakdown(a: Analysis, path: Path) -> Path:
    plt = pyplot()
    p = a.prediction
    fig, ax = plt.subplots(figsize=(9, 2.8))
    left = 0.0
    cmap = plt.get_cmap("tab10")
    for i, k in enumerate(BREAKDOWN_KEYS):
        v = p.breakdown_s[k]
        if v <= 0:
            continue
        ax.barh([0], [v], left=left, color=cmap(i), label=f"{breakdown_label(p, k)}: {v:.3g} s ({v / p.step_time_s:.1%})")
        left += v
    ax.set_yticks([])
    ax.set_xlabel("time (s)")
    ax.set_xlim(0, p.step_time_s * 1.001)
    ax.set_title(f"Step breakdown — {p.scenario.name}: {p.step_time_s:.3g} s")
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.35), ncol=3, frameon=False)
    return save_figure(fig, path, dpi=110, bbox_inches="tight")


def label_log_minor_ticks(ax) -> None:
    """Minor tick labels on a log y axis that cannot collide: none when the axis spans more than about one
    decade (the major labels say enough), else only 2× and 5× each decade, and none where a label would touch
    another (drawn extents checked)."""
    from matplotlib.ticker import FuncFormatter, NullFormatter
    import math as _m
    lo, hi = ax.get_ylim()
    if lo <= 0 or _m.log10(hi / lo) > 1.2:
        ax.yaxis.set_minor_formatter(NullFormatter())
        return

    def fmt(v, _):
        mant = v / 10 ** _m.floor(_m.log10(v) + 1e-9)
        return (f"{v:,.0f}" if v >= 100 else f"{v:.3g}") if round(mant, 6) in (2.0, 5.0) else ""
    ax.yaxis.set_minor_formatter(FuncFormatter(fmt))


def drop_colliding_labels(ax) -> None:
    """Blank every minor y tick label whose drawn box overlaps a major label or an earlier minor label."""
    fig = ax.figure
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    kept = [t.get_window_extent(r) for t in ax.yaxis.get_ticklabels() if t.get_text() and t.get_visible()]
    for t in ax.yaxis.get_ticklabels(minor=True):
        if not (t.get_text() and t.get_visible()):
            continue
        box = t.get_window_extent(r)
        if any(box.overlaps(k) for k in kept):
            t.set_visible(False)
        else:
            kept.append(box)


def scaling_figure(a: Analysis):
    """The scaling figure (see plot_scaling); separate so that its layout can be checked without a file."""
    from matplotlib.ticker import FuncFormatter
    plt = pyplot()
    fig, axs = plt.subplots(2, 2, figsize=(12, 8))
    (ax1, ax2), (ax3, ax4) = axs
    styles = {"strong": ("o", "-", "#1f77b4"), "weak": ("s", "--", "#d62728")}
    for mode, (mk, ls, c) in styles.items():
        pts = sorted((s for s in a.scaling if s.mode == mode and s.step_s is not None), key=lambda s: s.num_gpus)
        if not pts:
            continue
        n = [s.num_gpus for s in pts]

        def line(ax, ys, label, style=ls, alpha=1.0):
            ax.plot(n, ys, style, color=c, alpha=alpha, label=label)
            for fits in (True, False):
                sel = [(k, y) for k, y, s in zip(n, ys, pts) if s.fits == fits]
                if sel:
                    ax.scatter([k for k, _ in sel], [y for _, y in sel], marker=mk, s=40, zorder=3, alpha=alpha,
                               edgecolors=c, facecolors=c if fits else "white", linewidths=1.5)

        line(ax1, [s.step_s for s in pts], mode)
        line(ax2, [s.efficiency * 100 for s in pts], f"{mode}: scaling efficiency")
        line(ax2, [s.communication_share * 100 for s in pts], f"{mode}: exposed communication, % of step",
             style=":", alpha=0.6)
        line(ax3, [s.energy_per_step_j / 1e3 for s in pts], mode)
    by_n = {s.num_gpus: s.interruptions_per_day for s in a.scaling}
    ax4.plot(sorted(by_n), [by_n[k] for k in sorted(by_n)], "o-", color="black",
             label=f"N × {a.options.failures_per_gpu_hour:.3g} failures per GPU-hour × 24 h")
    fmt = FuncFormatter(lambda v, _: f"{v:,.0f}")
    gfmt = FuncFormatter(lambda v, _: f"{v:,.0f}" if v >= 100 else f"{v:.3g}")
    for ax in axs.flat:
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_formatter(fmt)
        ax.set_xlabel("GPUs (log scale)")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    ax1.set_yscale("log")
    ax1.set_ylabel("step time (s, log scale)")
    ax1.set_title("Step time", fontsize=9)
    ax2.set_ylabel("%")
    ax2.set_ylim(0, max([105.0] + [s.efficiency * 105 for s in a.scaling if s.efficiency is not None]))
    ax2.set_title("Efficiency (strong: T0·N0/(T·N); weak: T0/T), exposed comm share", fontsize=9)
    ax3.set_yscale("log")
    ax3.set_ylabel("energy per step, whole job (kJ, log scale)")
    ax3.set_title("Energy per step", fontsize=9)
    ax4.set_yscale("log")
    ax4.set_ylabel("expected interruptions per day (log scale)")
    ax4.set_title("Expected interruptions per day (same for strong and weak)", fontsize=9)
    fig.suptitle(f"Scaling — {a.prediction.scenario.name} (strong: fixed global batch; weak: fixed batch per replica; "
                 "hollow marker = does not fit in memory)", fontsize=10)
    fig.tight_layout()
    for ax in (ax1, ax3, ax4):
        ax.yaxis.set_major_formatter(gfmt)
        label_log_minor_ticks(ax)
        ax.tick_params(axis="y", which="minor", labelsize=7)
        drop_colliding_labels(ax)
    return fig


def plot_scaling(a: Analysis, path: Path) -> Path:
    """Step time, efficiency and communication share, energy per step and interruptions per day against the GPU
    count; hollow markers = the plan does not fit in memory at that count."""
    return save_figure(scaling_figure(a), path, dpi=100, tight_layout=False)


def plot_memory(a: Analysis, path: Path) -> Path:
    plt = pyplot()
    mems = a.prediction.memory_by_stage
    fig, ax = plt.subplots(figsize=(max(5, 1.2 * len(mems) + 3), 4.5))
    keys = list(mems[0].items)
    bottom = [0.0] * len(mems)
    cmap = plt.get_cmap("tab10")
    xs = list(range(len(mems)))
    for i, k in enumerate(keys):
        v = [m.items.get(k, 0.0) / 1e9 for m in mems]
        ax.bar(xs, v, bottom=bottom, color=cmap(i), label=k)
        bottom = [b + x for b, x in zip(bottom, v)]
    cap = mems[0].capacity_bytes / 1e9
    ax.axhline(cap, color="red", ls="--", lw=1, label=f"HBM capacity {cap:.1f} GB")
    ax.set_xticks(xs, [rank_label(a.prediction.scenario.plan, m.stage) for m in mems])
    ax.set_ylabel("GB per rank (1 GB = 1e9 bytes)")
    ax.set_ylim(0, max(cap, max(bottom)) * 1.1)
    ax.set_title("Memory per rank by pipeline " + ("rank" if a.prediction.scenario.plan.dualpipe else "stage"))
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))
    return save_figure(fig, path, dpi=110)


def plot_ledger(a: Analysis, path: Path) -> Path:
    plt = pyplot()
    rows = a.data_movement
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    names = [r.level for r in rows]
    ax1.bar(names, [r.bytes_per_step if r.bytes_per_step > 0 else float("nan") for r in rows], color="#1f77b4")
    for i, r in enumerate(rows):
        if r.bytes_per_step <= 0:
            ax1.annotate("0", (i, 0), ha="center", va="bottom", xycoords=("data", "axes fraction"), fontsize=8,
                         xytext=(0, 4), textcoords="offset points")
    ax1.set_yscale("log")
    ax1.set_ylabel("bytes per GPU per step (log scale)")
    ax1.set_title("Bytes moved per level")
    ax2.bar(names, [r.share_of_step * 100 for r in rows], color="#ff7f0e", label="time at peak bandwidth")
    mod = [(i, r.modelled_s / a.prediction.step_time_s * 100) for i, r in enumerate(rows) if r.modelled_s]
    ax2.scatter([i for i, _ in mod], [v for _, v in mod], color="black", zorder=3,
                label="time the core model charges (memory-bound ops; transfers)")
    ax2.axhline(100, color="red", ls="--", lw=1, label="step time")
    ax2.set_ylabel("% of step")
    ax2.set_title("Time that traffic needs at the level's bandwidth")
    ax2.set_ylim(0, max([115.0] + [r.share_of_step * 110 for r in rows] + [v * 1.1 for _, v in mod]))
    ax2.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=2, frameon=False)
    for ax in (ax1, ax2):
        ax.tick_params(axis="x", rotation=30)
        ax.grid(True, axis="y", alpha=0.3)
    fig.suptitle(f"Data-movement ledger — {a.prediction.scenario.name}", fontsize=10)
    return save_figure(fig, path, dpi=110, bbox_inches="tight")


def plot_persistence(a: Analysis, path: Path) -> Path:
    """Recurrent models only: useful TFLOP/s vs hidden size with and without persistent weights (the cliff)."""
    plt = pyplot()
    c = a.distance.persistence
    fig, ax = plt.subplots(figsize=(8, 4.5))
    hs = [q.hidden for q in c.points]
    n = a.prediction.scenario.num_gpus
    ax.plot(hs, [q.useful_flop_per_s_per_gpu / 1e12 for q in c.points], "o-", label="with persistence where it fits")
    ax.plot(hs, [q.useful_flop_per_s_per_gpu * q.step_s / q.core_step_s / 1e12 for q in c.points], "s--", alpha=0.6,
            label="weights re-read from HBM every time step (core model)")
    ax.axvline(c.hidden_limit + 0.5, color="red", ls=":", label=f"SRAM limit: hidden {c.hidden_limit}")
    ax.set_xlabel("hidden size")
    ax.set_ylabel("useful TFLOP/s per GPU")
    ax.set_title(f"Persistent-RNN cliff — {a.prediction.scenario.name} ({n} GPUs): x{c.cliff_ratio:.2f} at the limit",
                 fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    return save_figure(fig, path, dpi=110)


PLOTS = {"roofline": plot_roofline, "breakdown": plot_breakdown, "scaling": plot_scaling, "memory": plot_memory,
         "ledger": plot_ledger}


def write_plots(a: Analysis, directory: str) -> list[Path]:
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    paths = [fn(a, out / f"{name}.png") for name, fn in PLOTS.items()]
    if a.distance.persistence is not None:
        paths.append(plot_persistence(a, out / "persistence.png"))
    return paths
