"""Locality probe: the persistent-RNN lesson on this machine.

A recurrent step h ← h·W (state 1×H or B×H, float32), with the SAME weights W (H×H) every time step, timed
across hidden sizes. Useful FLOPs per step = 2·B·H²; weights = 4·H² bytes. While W fits in a cache level,
each step streams it from there; once it does not, every step refetches it from the next level out, and the
time per useful FLOP jumps (Diamos et al., 'Persistent RNNs', ICML 2016: keep the weights in on-chip memory
across time steps).

Model prediction from measured levels (roofline, Williams et al. CACM 2009): for weights of size S,
level(S) = nearest level with capacity ≥ S, and
    time per FLOP = max(t_floor, (bytes per FLOP) / read bandwidth of level(S)),  bytes per FLOP = 2 / B
with t_floor the best measured time per FLOP (compute and call overhead). The predicted cliffs are the
weight sizes equal to each cache level's measured capacity, i.e. H* = sqrt(capacity / 4 bytes).
"""
from __future__ import annotations

import math
import time
from typing import Any

import numpy as np

from narrowpath.measure.machine import cpu_model_name
from narrowpath.measure.segment import edge_x, find_plateaus
from narrowpath.measure.timing import Progress, host_provenance

_ITEM = 4  # float32


def hidden_sizes(*, quick: bool, max_weight_bytes: float) -> list[int]:
    """Hidden sizes, 4 per octave of weight bytes (2 quick), from 256 KiB of weights to `max_weight_bytes`."""
    per = 2 if quick else 4
    lo, hi = math.sqrt(256 * 1024 / _ITEM), math.sqrt(max_weight_bytes / _ITEM)
    num = int(round(2 * math.log2(hi / lo) * per)) + 1
    return sorted({int(round(lo * 2 ** (i / (2 * per)) / 16)) * 16 for i in range(num)})


def _step_fn(h_size: int, batch: int, seed: int):
    """(backend, step closure factory): one thread through PyTorch when present, else NumPy's BLAS.

    One thread, like the memory probe whose levels predict the cliff (a multi-threaded BLAS gemv on a small
    VM also varies 3× between runs from thread wake-ups). W is scaled by 1/sqrt(H) so the state neither
    overflows nor sinks into slow denormals over the steps.
    """
    try:
        import torch
    except ImportError:
        rng = np.random.default_rng(seed)
        w = (rng.standard_normal((h_size, h_size), dtype=np.float32) / np.float32(math.sqrt(h_size)))
        shape = (h_size,) if batch == 1 else (batch, h_size)

        def run_np(steps: int) -> None:
            bufs = [rng.standard_normal(shape, dtype=np.float32), np.empty(shape, dtype=np.float32)]
            for s in range(steps):
                np.matmul(bufs[s % 2], w, out=bufs[(s + 1) % 2])
        return "numpy", run_np
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(seed)
    wt = (torch.randn(h_size, h_size, generator=g) / math.sqrt(h_size)).T.contiguous()  # h·W = Wᵀh

    def run_torch(steps: int) -> None:
        bufs = [torch.randn(h_size, batch, generator=g), torch.empty(h_size, batch)]
        for s in range(steps):
            if batch == 1:
                torch.mv(wt, bufs[s % 2][:, 0], out=bufs[(s + 1) % 2][:, 0])
            else:
                torch.mm(wt, bufs[s % 2], out=bufs[(s + 1) % 2])
    return "torch-cpu (1 thread)", run_torch


def _time_per_step_s(run, steps: int, repeats: int) -> float:
    times = []
    for r in range(repeats + 1):
        t0 = time.perf_counter()
        run(steps)
        if r:  # the first pass is the warm-up
            times.append((time.perf_counter() - t0) / steps)
    return float(np.median(times))


def probe_locality(*, quick: bool = False, levels: list[dict[str, Any]] | None = None, batch: int = 1,
                   max_weight_bytes: float | None = None, repeats: int | None = None, progress: bool = True,
                   seed: int = 0) -> dict[str, Any]:
    """Time per useful FLOP across hidden sizes, measured cliffs, and the cliffs predicted from `levels`."""
    repeats = repeats or (2 if quick else 5)
    max_weight_bytes = max_weight_bytes or (256 * 2**20 if quick else 1024 * 2**20)
    sizes = hidden_sizes(quick=quick, max_weight_bytes=max_weight_bytes)
    prog = Progress("locality", len(sizes), progress)
    samples = []
    backend = ""
    for h in sizes:
        wbytes = _ITEM * h * h
        steps = max(3, min(200, int(4e8 / wbytes)))
        backend, run = _step_fn(h, batch, seed)
        t = _time_per_step_s(run, steps, repeats)
        flop = 2.0 * batch * h * h
        samples.append({"hidden": h, "batch": batch, "dtype": "fp32", "weight_bytes": wbytes, "steps": steps,
                        "repeats": repeats, "time_per_step_s": t, "s_per_flop": t / flop,
                        "flops_per_s": flop / t})
        prog.step(f"H={h} ({wbytes / 2**20:.2f} MiB of weights): {flop / t / 1e9:.1f} GFLOP/s")
    measured = measured_cliffs(samples)
    predicted = predicted_cliffs(samples, levels or [], batch)
    return {"probe": "locality", "device": cpu_model_name(), "backend": backend, "threads": 1, "dtype": "fp32",
            "batch": batch, "repeats": repeats,
            "quick": quick, "provenance": host_provenance(), "samples": samples,
            "measured_cliffs": measured, "predicted_cliffs": predicted,
            "comparison": compare_cliffs(measured, predicted)}


def measured_cliffs(samples: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Weight sizes where time per FLOP steps up (plateau edges of the measured curve)."""
    x = [s["weight_bytes"] for s in samples]
    y = [s["s_per_flop"] for s in samples]
    plats = find_plateaus(y, monotone="increasing")
    out = []
    for a, b in zip(plats, plats[1:]):
        if b.level_y > a.level_y:
            wb = edge_x(x, y, a, b)
            out.append({"weight_bytes": wb, "hidden": math.sqrt(wb / _ITEM), "jump": b.level_y / a.level_y,
                        "s_per_flop_before": a.level_y, "s_per_flop_after": b.level_y})
    return out


def predicted_s_per_flop(weight_bytes: float, levels: list[dict[str, Any]], batch: int, floor_s: float) -> float:
    """Roofline time per useful FLOP for weights of `weight_bytes` streamed from the level that holds them."""
    for lv in levels:
        if weight_bytes <= lv["capacity_bytes"] or lv is levels[-1]:
            bw = lv.get("read_bandwidth_bytes_per_s") or lv["bandwidth_bytes_per_s"]
            return max(floor_s, (2.0 / batch) / bw)
    return floor_s


def predicted_cliffs(samples: list[dict[str, Any]], levels: list[dict[str, Any]], batch: int) -> list[dict]:
    """One cliff per cache level: where the weights stop fitting it, and the predicted jump there."""
    if not levels:
        return []
    floor = min(s["s_per_flop"] for s in samples)
    out = []
    for lv in levels[:-1]:
        cap = lv["capacity_bytes"]
        before = predicted_s_per_flop(cap * 0.99, levels, batch, floor)
        after = predicted_s_per_flop(cap * 1.01, levels, batch, floor)
        out.append({"level": lv["name"], "weight_bytes": cap, "hidden": math.sqrt(cap / _ITEM),
                    "jump": after / before, "s_per_flop_before": before, "s_per_flop_after": after})
    return out


MAX_MATCH_RATIO = 4.0
"""A measured cliff further than this factor (in weight bytes) from a predicted one is not that level's cliff."""


def match_cliffs(measured_bytes: list[float], predicted_bytes: list[float],
                 max_ratio: float = MAX_MATCH_RATIO) -> list[int | None]:
    """For each predicted cliff (ascending), the index of its measured cliff or None: a one-to-one matching that
    keeps both orders (a bigger level's cliff comes at bigger weights) and minimises the summed |log ratio|, a
    predicted cliff left unmatched costing log(max_ratio). Matching each predicted cliff to its nearest measured
    one independently gave one measured cliff to two cache levels."""
    skip = math.log(max_ratio)
    P, M = len(predicted_bytes), len(measured_bytes)
    # best[i][j]: least cost of the first i predicted and j measured cliffs; choice records the move
    best = [[0.0] * (M + 1) for _ in range(P + 1)]
    move = [[""] * (M + 1) for _ in range(P + 1)]
    for i in range(1, P + 1):
        best[i][0], move[i][0] = best[i - 1][0] + skip, "p"
    for j in range(1, M + 1):
        move[0][j] = "m"
    for i in range(1, P + 1):
        for j in range(1, M + 1):
            cost = abs(math.log(measured_bytes[j - 1] / predicted_bytes[i - 1]))
            options = [(best[i - 1][j] + skip, "p"), (best[i][j - 1], "m")]
            if cost <= skip:
                options.append((best[i - 1][j - 1] + cost, "pm"))
            best[i][j], move[i][j] = min(options)
    out: list[int | None] = [None] * P
    i, j = P, M
    while i > 0 or j > 0:
        step = move[i][j]
        if step == "pm":
            out[i - 1] = j - 1
        i, j = i - (step in ("p", "pm")), j - (step in ("m", "pm"))
    return out


def compare_cliffs(measured: list[dict], predicted: list[dict]) -> list[dict[str, Any]]:
    """Each predicted cliff beside the measured cliff matched to it (`match_cliffs`: one level per measured
    cliff), with the ratio of weight bytes measured / predicted; None where no measured cliff is within
    MAX_MATCH_RATIO."""
    order = sorted(range(len(measured)), key=lambda k: measured[k]["weight_bytes"])
    p_order = sorted(range(len(predicted)), key=lambda k: predicted[k]["weight_bytes"])
    matched = match_cliffs([measured[k]["weight_bytes"] for k in order],
                           [predicted[k]["weight_bytes"] for k in p_order])
    pairs = dict(zip(p_order, matched))
    rows = []
    for i, p in enumerate(predicted):
        m = measured[order[pairs[i]]] if pairs[i] is not None else None
        rows.append({"level": p["level"], "predicted_weight_bytes": p["weight_bytes"],
                     "predicted_hidden": p["hidden"], "predicted_jump": p["jump"],
                     "measured_weight_bytes": m["weight_bytes"] if m else None,
                     "measured_hidden": m["hidden"] if m else None, "measured_jump": m["jump"] if m else None,
                     "ratio": m["weight_bytes"] / p["weight_bytes"] if m else None})
    return rows
