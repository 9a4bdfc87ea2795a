"""PNG plots of an Analysis (matplotlib, Agg backend): roofline, step breakdown, scaling, memory per rank, ledger.

Plotting lives only here (STYLE.md §11). Each function takes the Analysis and an output path and returns it.
"""
from __future__ import annotations

from pathlib import Path

from narrowpath.analysis import Analysis
from narrowpath.report.prediction import LABELS
from narrowpath.schedule.step import BREAKDOWN_KEYS

COLORS = {"matrix": "#1f77b4", "flash": "#9467bd", "vector": "#ff7f0e"}


def _plt():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def plot_roofline(a: Analysis, path: Path) -> Path:
    """Attained FLOP/s vs arithmetic intensity (FLOP per HBM byte) of the step's ops, with each level's roof."""
    plt = _plt()
    dev = a.prediction.scenario.system.device
    prec = a.prediction.scenario.plan.precision
    peak = dev.matrix_peak(prec)
    fig, ax = plt.subplots(figsize=(8, 5.5))
    pts = [r for r in a.context.ops if r.op.flop > 0 and r.op.hbm_bytes > 0]
    xs = [r.op.flop / r.op.hbm_bytes for r in pts]
    lo = min(xs + [1.0]) / 4
    hi = max(xs + [peak / dev.hbm.bw_bytes_per_s]) * 8
    import numpy as np
    x = np.logspace(np.log10(lo), np.log10(hi), 200)
    for j, (lv, style) in enumerate(zip(dev.levels, ("-", "--", "-.", ":"))):
        bw = lv.bw_bytes_per_s
        ax.plot(x, np.minimum(peak, bw * x), style, color="gray", lw=1.2, label=f"{lv.name} roof ({bw / 1e12:.2g} TB/s)")
        ridge = peak / bw
        if lo <= ridge <= hi:
            ax.plot([ridge], [peak], "o", color="black", ms=4)
            ax.annotate(f"{lv.name} ridge\n{ridge:.0f} FLOP/B", (ridge, peak), textcoords="offset points",
                        xytext=(4, -22 - 20 * (j % 2)), fontsize=7)
    for kind, c in COLORS.items():
        sel = [(r.op.flop / r.op.hbm_bytes, r.op.flop / r.time_each_s, r.total_s) for r in pts if r.op.kind == kind]
        if sel:
            tot = max(s for _, _, s in sel) or 1.0
            ax.scatter([s[0] for s in sel], [s[1] for s in sel], s=[15 + 200 * s[2] / tot for s in sel], c=c,
                       alpha=0.7, label=f"{kind} ops (size ∝ time/step)", edgecolors="black", linewidths=0.3)
    ax.axhline(peak, color="black", lw=0.8)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP / HBM byte)")
    ax.set_ylabel("attained FLOP/s")
    ax.set_ylim(peak / 1e4, peak * 2)
    ax.set_title(f"Roofline — {dev.name}, {prec} peak {peak / 1e12:.0f} TFLOP/s\n"
                 "ops of the critical stage (element-wise ops carry no FLOPs and are not shown)", fontsize=10)
    ax.legend(fontsize=7, loc="lower right")
    ax.grid(True, which="both", alpha=0.2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_breakdown(a: Analysis, path: Path) -> Path:
    plt = _plt()
    p = a.prediction
    fig, ax = plt.subplots(figsize=(9, 2.8))
    left = 0.0
    cmap = plt.get_cmap("tab10")
    for i, k in enumerate(BREAKDOWN_KEYS):
        v = p.breakdown_s[k]
        if v <= 0:
            continue
        ax.barh([0], [v], left=left, color=cmap(i), label=f"{LABELS[k]}: {v:.3g} s ({v / p.step_time_s:.1%})")
        left += v
    ax.set_yticks([])
    ax.set_xlabel("time (s)")
    ax.set_xlim(0, p.step_time_s * 1.001)
    ax.set_title(f"Step breakdown — {p.scenario.name}: {p.step_time_s:.3g} s")
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.35), ncol=3, frameon=False)
    fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path


def plot_scaling(a: Analysis, path: Path) -> Path:
    plt = _plt()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    for mode, marker in (("strong", "o-"), ("weak", "s--")):
        pts = [s for s in a.scaling if s.mode == mode]
        if not pts:
            continue
        n = [s.num_gpus for s in pts]
        ax1.plot(n, [s.step_s for s in pts], marker, label=f"{mode} scaling")
        ax2.plot(n, [s.efficiency * 100 for s in pts], marker, label=f"{mode}: efficiency")
        ax2.plot(n, [s.communication_share * 100 for s in pts], marker, alpha=0.5, label=f"{mode}: comm share")
    for ax in (ax1, ax2):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("GPUs")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    ax1.set_yscale("log")
    ax1.set_ylabel("step time (s)")
    ax2.set_ylabel("%")
    ax2.set_ylim(0, max([105.0] + [s.efficiency * 105 for s in a.scaling]))
    fig.suptitle(f"Scaling — {a.prediction.scenario.name} (strong: fixed global batch; weak: fixed batch per replica)",
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_memory(a: Analysis, path: Path) -> Path:
    plt = _plt()
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
    ax.axhline(cap, color="red", ls="--", lw=1, label=f"HBM capacity {cap:.0f} GB")
    ax.set_xticks(xs, [f"stage {m.stage}" for m in mems])
    ax.set_ylabel("GB per rank")
    ax.set_ylim(0, max(cap, max(bottom)) * 1.1)
    ax.set_title("Memory per rank by pipeline stage")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_ledger(a: Analysis, path: Path) -> Path:
    plt = _plt()
    rows = a.data_movement
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    names = [r.level for r in rows]
    ax1.bar(names, [r.bytes_per_step if r.bytes_per_step > 0 else float("nan") for r in rows], color="#1f77b4")
    for i, r in enumerate(rows):
        if r.bytes_per_step <= 0:
            ax1.annotate("0", (i, 0), ha="center", va="bottom", xycoords=("data", "axes fraction"), fontsize=8,
                         xytext=(0, 4), textcoords="offset points")
    ax1.set_yscale("log")
    ax1.set_ylabel("bytes per GPU per step")
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
    fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path


def plot_persistence(a: Analysis, path: Path) -> Path:
    """Recurrent models only: useful TFLOP/s vs hidden size with and without persistent weights (the cliff)."""
    plt = _plt()
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
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


PLOTS = {"roofline": plot_roofline, "breakdown": plot_breakdown, "scaling": plot_scaling, "memory": plot_memory,
         "ledger": plot_ledger}


def write_plots(a: Analysis, directory: str) -> list[Path]:
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    paths = [fn(a, out / f"{name}.png") for name, fn in PLOTS.items()]
    if a.distance.persistence is not None:
        paths.append(plot_persistence(a, out / "persistence.png"))
    return paths
