"""Plots of the measure probes (matplotlib, Agg backend): one PNG per probe, written into a folder.

compute_curve.png: attained GFLOP/s vs GEMM FLOPs per backend/dtype, with the peaks dashed.
memory_staircase.png: bandwidth vs working set per kernel, the detected levels as steps, OS cache sizes dotted.
locality_cliff.png: time per useful FLOP vs weight bytes, measured and predicted, cliffs marked.
collectives_busbw.png: busbw vs message size per collective.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from narrowpath.report.figures import pyplot, save_figure


def plot_compute(result: Mapping[str, Any], out_dir: Path) -> Path:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    keys = dict.fromkeys((s["backend"], s["dtype"]) for s in result["samples"])
    for i, (backend, dtype) in enumerate(keys):
        rows = [s for s in result["samples"] if s["backend"] == backend and s["dtype"] == dtype]
        ax.plot([s["flop"] for s in rows], [s["flops_per_s"] / 1e9 for s in rows], marker="o",
                color=f"C{i}", label=f"{backend} {dtype}")
    for i, (dt, p) in enumerate(result["peaks"].items()):
        if p["peak_flops_per_s"] > 0:
            ax.axhline(p["peak_flops_per_s"] / 1e9, ls="--", lw=0.8, color="gray")
            ax.text(0.01, p["peak_flops_per_s"] / 1e9, f"peak {dt}", transform=ax.get_yaxis_transform(),
                    fontsize=7, va="bottom", color="gray")
    ax.set(xscale="log", yscale="log", xlabel="GEMM size (FLOP, 2n^3)", ylabel="attained (GFLOP/s)",
           title=f"compute probe: {result['device']}")
    ax.legend(fontsize=8)
    return save_figure(fig, out_dir / "compute_curve.png")


def plot_memory(result: Mapping[str, Any], out_dir: Path) -> Path:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for i, k in enumerate(result["kernels"]):
        rows = [s for s in result["samples"] if s["kernel"] == k]
        ax.plot([s["working_set_bytes"] for s in rows], [s["bandwidth_bytes_per_s"] / 1e9 for s in rows],
                marker=".", lw=1, color=f"C{i}", label=k)
    lo = min(s["working_set_bytes"] for s in result["samples"])
    hi = max(s["working_set_bytes"] for s in result["samples"])
    start = lo
    for lv in result["levels"]:
        end = min(lv["capacity_bytes"], hi)
        ax.hlines(lv["bandwidth_bytes_per_s"] / 1e9, start, end, colors="k", lw=2.5, alpha=0.6)
        ax.annotate(f"{lv['name']} {lv['bandwidth_bytes_per_s'] / 1e9:.0f} GB/s", (start, lv["bandwidth_bytes_per_s"] / 1e9),
                    fontsize=8, va="bottom")
        if lv is not result["levels"][-1]:
            ax.axvline(lv["capacity_bytes"], color="k", ls="--", lw=0.8)
        start = end
    caches = result.get("os_caches")
    if caches is None:  # a GPU memory probe: the L2 the device reports
        caches = [{"name": "L2", "capacity_bytes": result["l2_cache_bytes"]}] if result.get("l2_cache_bytes") else []
    for c in caches:
        ax.axvline(c["capacity_bytes"], color="red", ls=":", lw=1)
        ax.text(c["capacity_bytes"], 0.02, f"{'OS' if 'os_caches' in result else 'device'} {c['name']} " + (f"{c['capacity_bytes'] / 2**20:g} MiB" if c["capacity_bytes"] >= 2**20
                                             else f"{c['capacity_bytes'] / 2**10:g} KiB"), fontsize=7,
                color="red", rotation=90, va="bottom", ha="right", transform=ax.get_xaxis_transform())
    ax.set(xscale="log", yscale="log", xlabel="working set (bytes)", ylabel="bandwidth (GB/s, STREAM counting)",
           title=f"memory probe on {result['device']}: detected levels (black) vs "
                 + ("OS caches (red)" if "os_caches" in result else "the device's L2 (red)"))
    ax.legend(fontsize=8, loc="upper right")
    return save_figure(fig, out_dir / "memory_staircase.png")


def plot_locality(result: Mapping[str, Any], out_dir: Path, levels: list[Mapping[str, Any]] | None = None) -> Path:
    plt = pyplot()
    from narrowpath.measure.locality_probe import predicted_s_per_flop
    fig, ax = plt.subplots(figsize=(7, 4.5))
    xs = [s["weight_bytes"] for s in result["samples"]]
    ax.plot(xs, [s["s_per_flop"] * 1e12 for s in result["samples"]], marker="o", label="measured")
    if levels:
        floor = min(s["s_per_flop"] for s in result["samples"])
        ax.plot(xs, [predicted_s_per_flop(x, list(levels), result["batch"], floor) * 1e12 for x in xs],
                ls="--", drawstyle="steps-post", label="predicted from measured levels")
    for c in result["measured_cliffs"]:
        ax.axvline(c["weight_bytes"], color="C0", lw=1)
    for c in result["predicted_cliffs"]:
        ax.axvline(c["weight_bytes"], color="C1", ls="--", lw=1)
        ax.annotate(c["level"], (c["weight_bytes"], ax.get_ylim()[1]), fontsize=8, color="C1", va="top")
    ax.set(xscale="log", yscale="log", xlabel="weight bytes (4 H^2)", ylabel="time per useful FLOP (ps)",
           title="locality cliff: recurrent step, same weights every step")
    ax.legend(fontsize=8)
    return save_figure(fig, out_dir / "locality_cliff.png")


def plot_collectives(result: Mapping[str, Any], out_dir: Path) -> Path:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for i, op in enumerate(dict.fromkeys(r["op"] for r in result["samples"])):
        rows = [r for r in result["samples"] if r["op"] == op]
        ax.plot([r["size_bytes"] for r in rows], [r["busbw_bytes_per_s"] / 1e9 for r in rows], marker="o",
                color=f"C{i}", label=op)
        f = result["fits"].get(op)
        if f:
            xs = [r["size_bytes"] for r in rows]
            fit_bw = [x * (r["busbw_bytes_per_s"] / r["algbw_bytes_per_s"]) /
                      (f["intercept_s"] + x * (r["busbw_bytes_per_s"] / r["algbw_bytes_per_s"]) / f["busbw_bytes_per_s"])
                      / 1e9 for x, r in zip(xs, rows)]
            ax.plot(xs, fit_bw, ls=":", color=f"C{i}")
    ax.set(xscale="log", yscale="log", xlabel="message size (bytes, nccl-tests convention)",
           ylabel="busbw (GB/s)", title=f"collectives: {result['backend']}, {result['num_ranks']} ranks "
                                        "(dotted: alpha-beta fit)")
    ax.legend(fontsize=8)
    return save_figure(fig, out_dir / "collectives_busbw.png")
