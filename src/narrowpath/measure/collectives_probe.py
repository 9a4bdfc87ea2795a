"""Collectives probe: all_reduce, all_gather, reduce_scatter, all_to_all and send/recv through torch.distributed.

Without a launcher it spawns `num_ranks` local processes on gloo (CPU). Under `torchrun` (RANK/WORLD_SIZE in
the environment) it joins the job as is — NCCL when CUDA is present — so the same command measures a real
multi-node fabric. Timing follows nccl-tests (src/common.cu): per size, warm-up iterations, a barrier,
`iters` back-to-back operations, device sync, elapsed / iters, then the mean over ranks — kept as
`batch_mean_time_s`. Deviations for the reported `time_s`: the sweep makes `passes` passes (5, quick 3, or
`--repeats`) over every (op, size), each pass in its own shuffled order, one batch per visit; each op inside a
batch is also timed on its own (gloo ops block until done), and the lower quartile of the per-op times pooled
over the passes is kept (mean over ranks; `median_time_s`, the median over passes of per-pass lower quartiles and a few
quantiles beside it). On a shared 2-core VM an op whose rank loses its core waits out
a ~4 ms scheduler slice, so 10–40 % of small-message ops, and whole batches, run 2–20× slow; a batch mean
inherits them, a low quantile of single ops does not (measured: run-to-run spread of the same size falls from
~50 % to ~30 % and α-β held-out error roughly halves). Under CUDA the launches are asynchronous, so there
`time_s` is the fastest batch mean. The number of ops per size comes from the fastest of three single ops, so a
stalled estimate cannot shrink the batch. Sizes step by ×2 (nccl-tests `-f 2`), so the held-out check —
fit α-β on every other size, predict the sizes in between — tests interpolation. Sizes, algbw and busbw use
the nccl-tests conventions of `busbw.py`; the result prints as an nccl-tests table (`report/measure_tables.py`).
"""
from __future__ import annotations

import json
import math
import os
import socket
import statistics
import sys
import tempfile
import time
from datetime import timedelta
from typing import Any

from narrowpath.errors import NarrowpathError
from narrowpath.measure.busbw import PROBE_OPS, bus_factor, nccl_tests_count, ring_steps
from narrowpath.measure.fit import fit_alpha_beta, fit_line_knee

_ITEM = 4  # float32
_QUANTILES = (0.0, 0.05, 0.1, 0.25, 0.5)


def message_sizes(*, quick: bool, max_bytes: float | None = None) -> list[int]:
    """nccl-tests `-b … -e … -f 2` style: ×2 steps, 4 KiB–4 MiB (quick) or 1 KiB–64 MiB (full)."""
    lo, hi, factor = (4096, 4 * 2**20, 2) if quick else (1024, 64 * 2**20, 2)
    hi = int(max_bytes or hi)
    out, s = [], lo
    while s <= hi:
        out.append(s)
        s *= factor
    return out


def _launched() -> bool:
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ


def probe_collectives(*, num_ranks: int = 2, ops: tuple[str, ...] = PROBE_OPS, quick: bool = False,
                      backend: str | None = None, max_bytes: float | None = None, tier: str | None = None,
                      progress: bool = True, timeout_s: float = 300.0, passes: int | None = None
                      ) -> dict[str, Any] | None:
    """Measure the collectives; returns the result on rank 0 (None on other ranks under torchrun). `passes`
    (`probe --repeats`): passes over every (op, size), default 5 (quick 3)."""
    bad = [op for op in ops if op not in PROBE_OPS]
    if bad:
        raise NarrowpathError(f"unknown collective(s) {bad}; known: {', '.join(PROBE_OPS)}")
    if passes is not None and passes < 1:
        raise NarrowpathError(f"--repeats (passes over every op and size) must be >= 1, got {passes}")
    plan = {"ops": list(ops), "sizes": message_sizes(quick=quick, max_bytes=max_bytes),
            "target_s": 0.015 if quick else 0.05, "warmup": 2, "min_ops": 6 if quick else 10,
            "max_ops": 150 if quick else 400, "passes": passes or (3 if quick else 5),
            "progress": progress, "backend": backend, "tier": tier, "timeout_s": timeout_s}
    if _launched():
        return _run_rank(plan, out_path=None)
    if num_ranks < 2:
        raise NarrowpathError(f"collectives probe needs at least 2 ranks, got {num_ranks}")
    plan["backend"] = local_backend(backend, num_ranks)
    import torch.multiprocessing as mp
    with tempfile.TemporaryDirectory(prefix="narrowpath-coll-") as tmp:
        out_path = os.path.join(tmp, "rank0.json")
        env = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port()), "WORLD_SIZE": str(num_ranks)}
        try:
            mp.start_processes(_spawned, args=(num_ranks, env, plan, out_path), nprocs=num_ranks, join=True,
                               start_method="spawn")
        except Exception as exc:  # ProcessRaisedException carries the child's traceback text
            raise NarrowpathError(f"collectives probe failed in a rank: {str(exc).strip().splitlines()[-1]}") \
                from None
        with open(out_path) as f:
            return json.load(f)


def local_backend(backend: str | None, num_ranks: int) -> str | None:
    """The backend of `num_ranks` ranks spawned on this machine: NCCL binds one GPU per rank (rank i on cuda:i),
    so with fewer GPUs than ranks an unstated backend is gloo (the host's collectives, said in the result's
    `backend`) and a stated `nccl` is refused in one line; else the stated one (None: chosen per rank)."""
    import torch
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if backend == "nccl" and gpus < num_ranks:
        hint = f"--ranks {gpus} or --backend gloo" if gpus >= 2 else "--backend gloo"
        raise NarrowpathError(f"--backend nccl: {num_ranks} local ranks need {num_ranks} GPUs (one per rank), this "
                              f"machine has {gpus}; use {hint}")
    if backend is None and 0 < gpus < num_ranks:
        return "gloo"
    return backend


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _spawned(rank: int, world: int, env: dict[str, str], plan: dict, out_path: str) -> None:
    os.environ.update(env)
    os.environ.update({"RANK": str(rank), "LOCAL_RANK": str(rank), "LOCAL_WORLD_SIZE": str(world)})
    _run_rank(plan, out_path)


def _run_rank(plan: dict, out_path: str | None) -> dict[str, Any] | None:
    import torch
    import torch.distributed as dist
    cuda = torch.cuda.is_available()
    backend = plan["backend"] or ("nccl" if cuda else "gloo")
    dist.init_process_group(backend, timeout=timedelta(seconds=plan["timeout_s"]))
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if backend == "nccl" else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    else:
        torch.set_num_threads(1)
    try:
        rows = _sweep(plan, world, device, rank)
        result = None
        if rank == 0:
            local = int(os.environ.get("LOCAL_WORLD_SIZE", world))
            tier = plan["tier"] or ("scale_out" if local < world else "scale_up")
            dev_name = torch.cuda.get_device_name(device) if device.type == "cuda" else _cpu_name()
            result = {"probe": "collectives", "backend": backend, "num_ranks": world, "tier": tier,
                      "device": dev_name, "dtype": "fp32", "warmup": plan["warmup"], "samples": rows,
                      "fits": fit_all(rows, world), "provenance": _provenance()}
            if out_path:
                with open(out_path, "w") as f:
                    json.dump(result, f)
        return result
    finally:
        dist.barrier()
        dist.destroy_process_group()


def _cpu_name() -> str:
    from narrowpath.measure.machine import cpu_model_name
    return cpu_model_name()


def _provenance() -> dict[str, Any]:
    import torch
    from narrowpath.measure.timing import host_provenance
    return {**host_provenance(), "torch": torch.__version__}


def _op_closure(op: str, size: int, world: int, device):
    """The operation for one nccl-tests `size` (see busbw.py for what size means per op)."""
    import torch
    import torch.distributed as dist
    count = max(world, size // _ITEM // world * world)
    rank = dist.get_rank()
    full = torch.ones(count, dtype=torch.float32, device=device)
    part = torch.ones(count // world, dtype=torch.float32, device=device)
    if op == "all_reduce":
        return lambda: dist.all_reduce(full), count
    if op == "all_gather":  # torch >= 2.13 names it all_gather_single (the old name warns)
        gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
        return lambda: gather(full, part), count
    if op == "reduce_scatter":
        scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
        return lambda: scatter(part, full), count
    if op == "all_to_all":
        out = torch.empty_like(full)
        return lambda: dist.all_to_all_single(out, full), count
    recv = torch.empty_like(full)
    nxt, prv = (rank + 1) % world, (rank - 1) % world

    def send_recv():  # nccl-tests sendrecv: each rank sends to the next and receives from the previous
        req = dist.isend(full, nxt)
        dist.recv(recv, prv)  # blocking receive: gloo's irecv().wait() adds ms-scale wake-up jitter here
        req.wait()
    return send_recv, count


def _sweep(plan: dict, world: int, device, rank: int) -> list[dict[str, Any]]:
    """All (op, size) pairs, `passes` times, each pass in its own shuffled order (same seed on every rank).

    A stall period (another tenant holding a core for a few hundred ms) then hits sizes scattered over the
    sweep, one pass each, instead of a contiguous block of sizes of one op — which a per-size statistic cannot
    undo and which tilts the α-β line."""
    import random
    pairs = [(op, size) for op in plan["ops"] for size in plan["sizes"]]
    state: dict[tuple[str, int], dict[str, Any]] = {}
    for p in range(plan["passes"]):
        order = list(pairs)
        random.Random(1000 + p).shuffle(order)
        for op, size in order:
            _visit(op, size, world, device, plan, state.setdefault((op, size), {}))
        if rank == 0 and plan["progress"]:
            print(f"[collectives] pass {p + 1}/{plan['passes']} over {len(pairs)} (op, size) pairs on {world} ranks",
                  file=sys.stderr, flush=True)
    rows = [_summarise(op, size, world, device, plan, state[(op, size)]) for op, size in pairs]
    if rank == 0 and plan["progress"]:
        for row in rows:
            print(f"[collectives] {row['op']} {row['size_bytes']} B on {world} ranks: {row['time_s'] * 1e6:.1f} us, "
                  f"busbw {row['busbw_bytes_per_s'] / 1e9:.2f} GB/s", file=sys.stderr, flush=True)
    return rows


def _visit(op: str, size: int, world: int, device, plan: dict, st: dict[str, Any]) -> None:
    """One pass over one (op, size): warm-up, (first visit: ops per pass), one timed batch of single-timed ops."""
    import torch
    import torch.distributed as dist
    fn, count = _op_closure(op, size, world, device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    first = "iters" not in st
    for _ in range(plan["warmup"] if first else 1):  # every visit re-allocates the buffers: touch them once
        fn()
    sync()
    if first:
        # Iterations to fill the time budget, agreed across ranks: the fastest of a few single ops (one op
        # stalled by a 4 ms scheduler slice would otherwise cut the batch to a couple of ops).
        one = []
        for _ in range(3):
            t0 = time.perf_counter()
            fn()
            sync()
            one.append(time.perf_counter() - t0)
        est = torch.tensor([min(one)], dtype=torch.float64, device=device)
        dist.all_reduce(est, op=dist.ReduceOp.MAX)
        num_ops = max(plan["min_ops"], min(plan["max_ops"], int(plan["target_s"] / max(float(est.item()), 1e-7))))
        st.update(count=count, iters=max(1, -(-num_ops // plan["passes"])), batches=[], ops_s=[], pass_q1=[])
    iters, clock = st["iters"], time.perf_counter
    ops_s = []
    dist.barrier()
    t0 = clock()
    for _ in range(iters):
        t1 = clock()
        fn()
        ops_s.append(clock() - t1)
    sync()
    batch = (clock() - t0) / iters
    st["batches"].append(batch)
    if device.type == "cuda":  # launches are asynchronous: only a batch mean (nccl-tests) is a time
        ops_s = [batch] * iters
    st["ops_s"] += ops_s
    st["pass_q1"].append(sorted(ops_s)[len(ops_s) // 4])


def _summarise(op: str, size: int, world: int, device, plan: dict, st: dict[str, Any]) -> dict[str, Any]:
    import torch
    import torch.distributed as dist
    ops_s, batches = sorted(st["ops_s"]), st["batches"]
    if device.type == "cuda":
        ops_s = [min(batches)] * 4
    qs = [ops_s[int(q * len(ops_s))] for q in _QUANTILES]
    stats = [ops_s[len(ops_s) // 4], ops_s[len(ops_s) // 2], statistics.mean(batches),
             statistics.median(st["pass_q1"])] + qs
    per_rank = torch.tensor(stats, dtype=torch.float64, device=device)
    dist.all_reduce(per_rank)
    t, t_median, t_batch, t_pass, *t_qs = (float(v) / world for v in per_rank.tolist())
    size_bytes = st["count"] * _ITEM
    return {"op": op, "size_bytes": size_bytes, "count": nccl_tests_count(op, size_bytes, world, _ITEM),
            "dtype": "float",
            "redop": "sum" if op in ("all_reduce", "reduce_scatter") else "none", "root": -1, "time_s": t,
            "algbw_bytes_per_s": size_bytes / t, "busbw_bytes_per_s": size_bytes / t * bus_factor(op, world),
            "median_time_s": t_median, "batch_mean_time_s": t_batch, "pass_median_q1_time_s": t_pass,
            "quantile_time_s": dict(zip((str(q) for q in _QUANTILES), t_qs)),
            "iters": st["iters"], "passes": plan["passes"], "num_ranks": world, "batch_times_s": batches}


def fit_all(rows: list[dict[str, Any]], num_ranks: int, *, time_key: str = "time_s") -> dict[str, dict[str, Any]]:
    """α-β per op on all sizes (one line, and two-regime: in-cache / beyond-cache, see `fit.fit_line_knee`),
    plus held-out checks: fit on every other size, predict the sizes between; mean and max relative error.

    `heldout_mean_rel_error` / `heldout_max_rel_error` are those of the two-regime fit (the model reported);
    the one-line fit's are `line_heldout_mean_rel_error` / `line_heldout_max_rel_error`."""
    fits = {}
    for op in dict.fromkeys(r["op"] for r in rows):
        pts = sorted((r["size_bytes"], r[time_key]) for r in rows if r["op"] == op)
        s, t = [p[0] for p in pts], [p[1] for p in pts]
        ab = fit_alpha_beta(op, num_ranks, s, t)
        kn = fit_line_knee(s, t)
        factor = bus_factor(op, num_ranks)
        entry = {"alpha_s": ab.alpha_s, "busbw_bytes_per_s": ab.busbw_bytes_per_s,
                 "intercept_s": ab.fit.intercept_s, "rms_rel_residual": ab.fit.rms_rel_residual,
                 "num_points": len(pts),
                 "knee": {"intercept_s": kn.intercept_s, "alpha_s": kn.intercept_s / ring_steps(op, num_ranks),
                          "busbw_bytes_per_s": _bw(factor, kn.slope_s_per_byte),
                          "busbw_beyond_knee_bytes_per_s": _bw(factor, kn.slope_beyond_s_per_byte),
                          "knee_bytes": kn.knee_bytes, "rms_rel_residual": kn.rms_rel_residual}}
        if len(pts) >= 4:
            xs, ys = s[1::2], t[1::2]
            line = fit_alpha_beta(op, num_ranks, s[0::2], t[0::2])
            knee = fit_line_knee(s[0::2], t[0::2])
            e_line = [abs(line.predict_s(x) - y) / y for x, y in zip(xs, ys)]
            e_knee = [abs(knee.predict_s(x) - y) / y for x, y in zip(xs, ys)]
            entry.update(heldout_mean_rel_error=sum(e_knee) / len(e_knee), heldout_max_rel_error=max(e_knee),
                         line_heldout_mean_rel_error=sum(e_line) / len(e_line),
                         line_heldout_max_rel_error=max(e_line), heldout_knee_bytes=knee.knee_bytes)
        fits[op] = entry
    return fits


def _bw(factor: float, slope_s_per_byte: float) -> float:
    return factor / slope_s_per_byte if slope_s_per_byte > 0 else math.inf
