"""`narrowpath probe {compute,memory,locality,collectives,all}`: measure this machine (see measure/)."""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from narrowpath.errors import NarrowpathError

PROBES = ("compute", "memory", "locality", "collectives", "all")


def register(sub) -> None:
    p = sub.add_parser("probe", help="measure this machine: GEMM rates, memory levels, locality cliff, collectives")
    p.add_argument("what", choices=PROBES, help="which probe (all = the four in turn)")
    p.add_argument("--quick", action="store_true", help="small sweep, under 20 s per probe")
    p.add_argument("--json", action="store_true", help="print the raw result as JSON instead of tables")
    p.add_argument("--output", "-o", metavar="FILE", help="also write the JSON result to FILE (for `calibrate`)")
    p.add_argument("--plots", metavar="DIR", help="write PNG plots into DIR")
    p.add_argument("--no-progress", action="store_true", help="no progress lines on stderr")
    p.add_argument("--repeats", type=int, help="timed repeats per sample (median kept)")
    p.add_argument("--device", metavar="ID", help="catalog device whose peaks the compute efficiency uses")
    p.add_argument("--max-bytes", type=float, help="largest working set / weights / message, bytes")
    p.add_argument("--memory-json", metavar="FILE", help="locality: levels from an earlier `probe memory -o`")
    p.add_argument("--batch", type=int, default=1, help="locality: state rows per step (default 1)")
    p.add_argument("--ranks", type=int, default=2, help="collectives: local ranks to spawn (default 2)")
    p.add_argument("--ops", help="collectives: comma-separated subset of all_reduce,all_gather,reduce_scatter,"
                                 "all_to_all,send_recv")
    p.add_argument("--backend", help="collectives: torch.distributed backend (default gloo, nccl under CUDA)")
    p.add_argument("--tier", help="collectives: tier the result calibrates (default scale_up, scale_out "
                                  "when ranks span nodes)")
    p.set_defaults(func=run)


def _peaks(device_id: str | None) -> dict[str, float]:
    if not device_id:
        return {}
    from narrowpath.catalog import store
    return dict(store.device(device_id).peak_matrix_flop_per_s)


def _run_one(what: str, args, memory_result=None) -> dict | None:
    from narrowpath.measure import collectives_probe, compute_probe, locality_probe, memory_probe
    prog = not args.no_progress
    if what == "compute":
        return compute_probe.probe_compute(quick=args.quick, repeats=args.repeats, peaks=_peaks(args.device),
                                           progress=prog)
    if what == "memory":
        return memory_probe.probe_memory(quick=args.quick, max_bytes=args.max_bytes, repeats=args.repeats,
                                         progress=prog)
    if what == "locality":
        if memory_result is None and args.memory_json:
            memory_result = _read_json(args.memory_json)
        if memory_result is None:
            print("[locality] no --memory-json: running a quick memory probe for the levels", file=sys.stderr)
            memory_result = memory_probe.probe_memory(quick=True, progress=False)
        res = locality_probe.probe_locality(quick=args.quick, levels=memory_result["levels"], batch=args.batch,
                                            max_weight_bytes=args.max_bytes, repeats=args.repeats, progress=prog)
        res["levels_used"] = memory_result["levels"]
        return res
    ops = tuple(o.strip() for o in args.ops.split(",")) if args.ops else collectives_probe.PROBE_OPS
    return collectives_probe.probe_collectives(num_ranks=args.ranks, ops=ops, quick=args.quick,
                                               backend=args.backend, max_bytes=args.max_bytes, tier=args.tier,
                                               progress=prog)


def _read_json(path: str) -> dict:
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise NarrowpathError(f"{path}: cannot read probe JSON ({exc})") from None
    if data.get("probe") == "all":
        data = data.get("memory") or {}
    if data.get("probe") != "memory":
        raise NarrowpathError(f"{path}: not a memory probe result (probe = {data.get('probe')!r})")
    return data


def run(args) -> int:
    if args.ranks < 2:
        raise NarrowpathError(f"--ranks must be >= 2, got {args.ranks}")
    t0 = time.perf_counter()
    if args.what == "all":
        result = {"probe": "all"}
        for what in ("compute", "memory", "locality", "collectives"):
            t1 = time.perf_counter()
            result[what] = _run_one(what, args, memory_result=result.get("memory"))
            if result[what] is not None:
                result[what]["wall_time_s"] = time.perf_counter() - t1
        result["wall_time_s"] = time.perf_counter() - t0
    else:
        result = _run_one(args.what, args)
    if result is None:  # a non-zero rank under torchrun: rank 0 reports
        return 0
    _report(result, args)
    return 0


def _report(result: dict, args) -> None:
    from narrowpath.report import measure_tables as tables
    parts = {k: v for k, v in result.items() if k in PROBES} if result["probe"] == "all" else {result["probe"]: result}
    if args.output:
        Path(args.output).write_text(json.dumps(result, indent=1))
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        fmt = {"compute": tables.format_compute, "memory": tables.format_memory,
               "locality": tables.format_locality, "collectives": tables.format_collectives}
        print("\n\n".join(fmt[k](v) for k, v in parts.items()))
        if "wall_time_s" in result:
            print(f"\nprobe all: {result['wall_time_s']:.1f} s")
    if args.plots:
        from narrowpath.report import measure_plots as plots
        out = Path(args.plots)
        written = []
        for k, v in parts.items():
            if k == "locality":
                written.append(plots.plot_locality(v, out, levels=v.get("levels_used")))
            else:
                written.append(getattr(plots, f"plot_{k}")(v, out))
        print("plots: " + ", ".join(str(p) for p in written), file=sys.stderr)
