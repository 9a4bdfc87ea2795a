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


def idle_steps(recs: list, field: str) -> tuple[list[float], list[float]]:
    """A step plot's points of one field over a lane's records, dropping to 0 while the lane idles between them (a
    lane idles only with nothing running, no prompt in progress and no KV block held) and after the last."""
    t: list[float] = []
    v: list[float] = []
    for r, nxt in zip(recs, recs[1:] + [None]):
        t.append(r.start_s)
        v.append(getattr(r, field))
        end = r.start_s + r.duration_s
        if nxt is None or nxt.start_s > end * (1 + 1e-12):
            t.append(end)
            v.append(0)
    return t, v


def plot_lane(run: ServingRun, path: Path) -> Path:
    """Decodes per iteration, prompt tokens per iteration and KV blocks in use over time (the logged lane; a
    disaggregated deployment's prefill and decode instance lanes as two lines). A merged run of decode steps is
    drawn at its mean KV blocks."""
    plt = pyplot()
    log = run.result.log
    roles = list(dict.fromkeys(r.role for r in log))
    fig, axes = plt.subplots(3, 1, figsize=(11, 8), sharex=True)
    for role in roles:
        recs = [r for r in log if r.role == role]
        for ax, field in zip(axes, ("decodes", "prompt_tokens", "kv_blocks_used")):
            t, v = idle_steps(recs, field)
            ax.step(t, v, where="post", lw=0.8, label=None if role == "lane" else f"{role} instance")
    for ax, label in zip(axes, ("decodes", "prompt tokens", "KV blocks used")):
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
