"""PNG plots of a serving run (matplotlib, Agg): latency distributions and the logged lane over time (batch,
prompt tokens, KV blocks in use)."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from narrowpath.report.figures import pyplot, save_figure
from narrowpath.schedule.serving_run import ServingRun


def plot_latency_cdf(run: ServingRun, path: Path) -> Path:
    """Empirical CDFs of TTFT, TPOT and end-to-end latency."""
    plt = pyplot()
    res = run.result
    fig, axes = plt.subplots(1, 3, figsize=(13, 4))
    for ax, (name, v) in zip(axes, (("TTFT", res.ttft_s), ("TPOT", res.tpot_s), ("end-to-end", res.e2e_s))):
        v = np.sort(v)
        ax.plot(v, np.arange(1, v.size + 1) / max(1, v.size), color="#1f77b4")
        ax.set_xlabel(f"{name} (s)")
        ax.set_ylabel("fraction of requests")
        ax.grid(alpha=0.3)
    fig.suptitle(f"{run.scenario.model.name} on {run.scenario.num_gpus} × {run.scenario.system.device.name}")
    return save_figure(fig, path)


def plot_lane(run: ServingRun, path: Path) -> Path:
    """Decodes per iteration, prompt tokens per iteration and KV blocks in use over time (the logged lane)."""
    plt = pyplot()
    log = run.result.log
    t = np.array([r.start_s for r in log])
    fig, axes = plt.subplots(3, 1, figsize=(11, 8), sharex=True)
    for ax, (label, v) in zip(axes, (("decodes", [r.decodes for r in log]),
                                     ("prompt tokens", [r.prompt_tokens for r in log]),
                                     ("KV blocks used", [r.kv_blocks_used for r in log]))):
        ax.step(t, v, where="post", lw=0.8)
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    axes[2].axhline(run.result.kv_blocks_per_lane, color="red", lw=0.8, ls="--", label="capacity")
    axes[2].legend(loc="lower right")
    axes[2].set_xlabel("time (s)")
    fig.suptitle("one lane (micro-batch of one attention-DP rank)")
    return save_figure(fig, path)


def write_serving_plots(run: ServingRun, out_dir: str | Path) -> list[Path]:
    d = Path(out_dir)
    d.mkdir(parents=True, exist_ok=True)
    return [plot_latency_cdf(run, d / "serve_latency.png"), plot_lane(run, d / "serve_lane.png")]
