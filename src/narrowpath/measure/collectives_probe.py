"""Collectives probe: all_reduce, all_gather, reduce_scatter, all_to_all and send/recv through torch.distributed.

Without a launcher it spawns `num_ranks` local processes on gloo (CPU). Under `torchrun` (RANK/WORLD_SIZE in
the environment) it joins the job as is — NCCL when CUDA is present — so the same command measures a real
multi-node fabric. Timing follows nccl-tests (src/common.cu): per size, warm-up iterations, a barrier,
`iters` back-to-back operations, device sync, elapsed / iters, then the mean over ranks. One deviation: that
timed batch runs `repeats` times and the median batch is kept, because on a shared or virtual machine a
single batch of a latency-bound size varies by 2× with process wake-up delays. Sizes, algbw and
busbw use the nccl-tests conventions of `busbw.py`; the result prints as an nccl-tests table
(`report/measure_tables.py`) and is fitted to α-β per op (`fit.py`), with held-out sizes checked.
"""
from __future__ import annotations

import json
import os
import socket
import sys
import tempfile
import time
from datetime import timedelta
from typing import Any

from narrowpath.errors import NarrowpathError
from narrowpath.measure.busbw import PROBE_OPS, bus_factor
from narrowpath.measure.fit import fit_alpha_beta

_ITEM = 4  # float32


def message_sizes(*, quick: bool, max_bytes: float | None = None) -> list[int]:
    """nccl-tests `-b … -e … -f` style: ×4 steps, 4 KiB–4 MiB (quick) or 1 KiB–64 MiB (full)."""
    lo, hi, factor = (4096, 4 * 2**20, 4) if quick else (1024, 64 * 2**20, 4)
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
                      progress: bool = True, timeout_s: float = 300.0) -> dict[str, Any] | None:
    """Measure the collectives; returns the result on rank 0 (None on other ranks under torchrun)."""
    bad = [op for op in ops if op not in PROBE_OPS]
    if bad:
        raise NarrowpathError(f"unknown collective(s) {bad}; known: {', '.join(PROBE_OPS)}")
    plan = {"ops": list(ops), "sizes": message_sizes(quick=quick, max_bytes=max_bytes),
            "target_s": 0.02 if quick else 0.05, "warmup": 2, "max_iters": 50,
            "repeats": 2 if quick else 5,
            "progress": progress, "backend": backend, "tier": tier, "timeout_s": timeout_s}
    if _launched():
        return _run_rank(plan, out_path=None)
    if num_ranks < 2:
        raise NarrowpathError(f"collectives probe needs at least 2 ranks, got {num_ranks}")
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
        rows = []
        for op in plan["ops"]:
            for size in plan["sizes"]:
                row = _measure(op, size, world, device, plan)
                rows.append(row)
                if rank == 0 and plan["progress"]:
                    print(f"[collectives] {op} {size} B on {world} ranks: {row['time_s'] * 1e6:.1f} us, "
                          f"busbw {row['busbw_bytes_per_s'] / 1e9:.2f} GB/s", file=sys.stderr, flush=True)
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


def _measure(op: str, size: int, world: int, device, plan: dict) -> dict[str, Any]:
    import torch
    import torch.distributed as dist
    fn, count = _op_closure(op, size, world, device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    for _ in range(plan["warmup"]):
        fn()
    sync()
    # Iterations to fill the time budget, agreed across ranks (max of the estimates).
    t0 = time.perf_counter()
    fn()
    sync()
    est = torch.tensor([time.perf_counter() - t0], dtype=torch.float64, device=device)
    dist.all_reduce(est, op=dist.ReduceOp.MAX)
    iters = int(max(2, min(plan["max_iters"], plan["target_s"] / max(float(est.item()), 1e-7))))
    batches = []
    for _ in range(plan["repeats"]):
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        sync()
        batches.append((time.perf_counter() - t0) / iters)
    per_rank = torch.tensor(sorted(batches)[len(batches) // 2], dtype=torch.float64, device=device)
    dist.all_reduce(per_rank)
    t = float(per_rank.item()) / world
    size_bytes = count * _ITEM
    return {"op": op, "size_bytes": size_bytes, "count": count, "dtype": "float",
            "redop": "sum" if op in ("all_reduce", "reduce_scatter") else "none", "root": -1, "time_s": t,
            "algbw_bytes_per_s": size_bytes / t, "busbw_bytes_per_s": size_bytes / t * bus_factor(op, world),
            "iters": iters, "repeats": plan["repeats"], "num_ranks": world, "batch_times_s": batches}


def fit_all(rows: list[dict[str, Any]], num_ranks: int) -> dict[str, dict[str, Any]]:
    """α-β per op on all sizes, plus a held-out check: fit on every other size, predict the rest."""
    fits = {}
    for op in dict.fromkeys(r["op"] for r in rows):
        pts = sorted((r["size_bytes"], r["time_s"]) for r in rows if r["op"] == op)
        s, t = [p[0] for p in pts], [p[1] for p in pts]
        ab = fit_alpha_beta(op, num_ranks, s, t)
        entry = {"alpha_s": ab.alpha_s, "busbw_bytes_per_s": ab.busbw_bytes_per_s,
                 "intercept_s": ab.fit.intercept_s, "rms_rel_residual": ab.fit.rms_rel_residual,
                 "num_points": len(pts)}
        if len(pts) >= 4:
            train = fit_alpha_beta(op, num_ranks, s[0::2], t[0::2])
            errs = [abs(train.predict_s(x) - y) / y for x, y in zip(s[1::2], t[1::2])]
            entry["heldout_max_rel_error"] = max(errs)
            entry["heldout_mean_rel_error"] = sum(errs) / len(errs)
        fits[op] = entry
    return fits
