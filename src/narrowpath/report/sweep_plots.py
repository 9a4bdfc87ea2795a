"""The sweep plot: per model, the best tokens/s per GPU (top) and per watt (bottom) against the GPU count, one
line per system (colour), global batch (line style) and objective (marker). Cells without a fitting plan are
left out of their line (a gap)."""
from __future__ import annotations

from typing import Any, Sequence

from narrowpath.report.figures import pyplot, save_figure


def plot_sweep(rows: Sequence[dict[str, Any]], path: str) -> str:
    plt = pyplot()
    models = list(dict.fromkeys(r["model"] for r in rows))
    colors = {k: f"C{i % 10}" for i, k in enumerate(dict.fromkeys(r["system"] for r in rows))}  # system: colour
    styles = {k: ("-", "--", ":", "-.")[i % 4] for i, k in enumerate(dict.fromkeys(r["gbs"] for r in rows))}
    markers = {k: "os^"[i % 3] for i, k in enumerate(dict.fromkeys(r["objective"] for r in rows))}
    several_objectives = len({r["objective"] for r in rows}) > 1
    several_batches = len({r["gbs"] for r in rows}) > 1
    fig, axes = plt.subplots(2, len(models), figsize=(max(4.2 * len(models), 5.5), 7.0), squeeze=False,
                             sharex="col")
    for col, model in enumerate(models):
        lines: dict[tuple, list[dict[str, Any]]] = {}
        for r in rows:
            if r["model"] == model:
                lines.setdefault((r["system"], r["gbs"], r["objective"]), []).append(r)
        for (system, gbs, objective), items in lines.items():
            items = sorted(items, key=lambda r: r["num_gpus"])
            label = system + (f", gbs {gbs}" if several_batches else "") + (f", {objective}" if several_objectives
                                                                            else "")
            x = [r["num_gpus"] for r in items]
            for row, key in ((0, "tokens_per_s_per_gpu"), (1, "tokens_per_s_per_w")):
                y = [r[key] if r["fits"] and r[key] is not None else float("nan") for r in items]
                axes[row][col].plot(x, y, color=colors[system], linestyle=styles[gbs], marker=markers[objective],
                                    label=label)
        axes[0][col].set_title(model, fontsize=10)
        axes[1][col].set_xlabel("GPUs")
        counts = sorted({r["num_gpus"] for r in rows if r["model"] == model})
        for row in (0, 1):
            ax = axes[row][col]
            ax.set_xscale("log", base=2)
            ax.set_xticks(counts, [str(n) for n in counts])
            ax.minorticks_off()
            ax.grid(True, alpha=0.3)
            ax.set_ylim(bottom=0)
    axes[0][0].set_ylabel("best tokens/s per GPU")
    axes[1][0].set_ylabel("tokens/s per W (tokens/J)")
    handles, labels = axes[0][0].get_legend_handles_labels()
    seen = dict(zip(labels, handles))
    for ax in axes[0][1:]:
        h, lab = ax.get_legend_handles_labels()
        seen.update(zip(lab, h))
    fig.legend(list(seen.values()), list(seen), loc="lower center", ncol=min(4, len(seen)), fontsize=8, frameon=False)
    fig.suptitle("Sweep: the best plan of each cell", fontsize=11)
    fig.tight_layout(rect=(0, 0.06, 1, 0.97))
    return save_figure(fig, path, dpi=110, tight_layout=False)
