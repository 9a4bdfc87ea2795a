"""`narrowpath probe {compute,memory,locality,collectives,all}`: measure this machine (see measure/)."""
from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path

from narrowpath.errors import NarrowpathError
from narrowpath.measure.machine import cuda_available, physical_memory_bytes
from narrowpath.spec.strict_load import load_json
from narrowpath.spec.system import TIER_NAMES

PROBES = ("compute", "memory", "locality", "collectives", "all")
MAX_LOCAL_RANKS = 128  # local processes the collectives probe may spawn


def register(sub) -> None:
    p = sub.add_parser("probe", help="measure this machine: GEMM rates, memory levels, locality cliff, collectives",
                       description="Measure the machine this runs on: GEMM FLOP/s by size and dtype (compute), "
                       "bandwidth by working-set size and the cache levels it reveals (memory), the locality cliff "
                       "of a recurrent step (locality), collectives through torch.distributed (collectives; needs "
                       "the `measure` extra). Save with -o for `narrowpath calibrate`.")
    p.add_argument("what", choices=PROBES, help="which probe (all = the four in turn)")
    p.add_argument("--quick", action="store_true", help="small sweep, under 20 s per probe")
    p.add_argument("--json", action="store_true", help="print the raw result as JSON instead of tables")
    p.add_argument("--output", "-o", metavar="FILE", help="also write the JSON result to FILE (for `calibrate`)")
    p.add_argument("--plots", metavar="DIR", help="write PNG plots into DIR")
    p.add_argument("--no-progress", action="store_true", help="no progress lines on stderr")
    p.add_argument("--repeats", type=int, help="timed repeats per sample (median kept); collectives: passes over "
                                               "every (op, size) (default 5, quick 3)")
    p.add_argument("--device", metavar="ID", help="catalog device whose peaks the compute efficiency uses")
    p.add_argument("--host", action="store_true",
                   help="compute and memory: measure the host CPU even where PyTorch sees a GPU (default: the GPU's "
                        "GEMMs beside the host's, and the GPU's memory levels)")
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
                                           progress=prog, cuda=False if args.host else None)
    if what == "memory":
        if not args.host and cuda_available():
            from narrowpath.measure import gpu_memory_probe
            return gpu_memory_probe.probe_gpu_memory(quick=args.quick, max_bytes=args.max_bytes,
                                                     repeats=args.repeats, progress=prog)
        return memory_probe.probe_memory(quick=args.quick, max_bytes=args.max_bytes, repeats=args.repeats,
                                         progress=prog)
    if what == "locality":
        if memory_result is None and args.memory_json:
            memory_result = _read_json(args.memory_json)
        why = "no --memory-json"
        if memory_result is not None and memory_result.get("backend") == "torch-cuda":
            memory_result = None  # the locality probe runs on the host: a GPU's levels are not its caches
            why = "the memory levels are the GPU's, the locality probe runs on the host"
        if memory_result is None:
            print(f"[locality] {why}: running a quick host memory probe for the levels", file=sys.stderr)
            memory_result = memory_probe.probe_memory(quick=True, progress=False)
        res = locality_probe.probe_locality(quick=args.quick, levels=memory_result["levels"], batch=args.batch,
                                            max_weight_bytes=args.max_bytes, repeats=args.repeats, progress=prog)
        res["levels_used"] = memory_result["levels"]
        return res
    ops = tuple(o.strip() for o in args.ops.split(",")) if args.ops else collectives_probe.PROBE_OPS
    return collectives_probe.probe_collectives(num_ranks=args.ranks, ops=ops, quick=args.quick,
                                               backend=args.backend, max_bytes=args.max_bytes, tier=args.tier,
                                               progress=prog, passes=args.repeats)


def read_probe_json(path: str) -> dict:
    """A probe result file (`probe ... -o`) as a JSON object; every error names the file."""
    try:
        data = load_json(Path(path).read_bytes().decode("utf-8"))
    except OSError as exc:
        raise NarrowpathError(f"{path}: cannot read probe JSON ({exc.strerror or exc})") from None
    except UnicodeDecodeError as exc:
        raise NarrowpathError(f"{path}: cannot read probe JSON (not UTF-8 text at byte {exc.start})") from None
    except ValueError as exc:
        raise NarrowpathError(f"{path}: cannot read probe JSON ({str(exc).splitlines()[0]})") from None
    except RecursionError:
        raise NarrowpathError(f"{path}: cannot read probe JSON (nested too deeply)") from None
    if not isinstance(data, dict):
        raise NarrowpathError(f"{path}: not a narrowpath probe result (a JSON {type(data).__name__}, not an object)")
    return data


def _read_json(path: str) -> dict:
    data = read_probe_json(path)
    if data.get("probe") == "all":
        data = data.get("memory") or {}
    if not isinstance(data, dict) or data.get("probe") != "memory":
        raise NarrowpathError(f"{path}: not a memory probe result (probe = "
                              f"{data.get('probe') if isinstance(data, dict) else data!r})")
    levels = data.get("levels")
    if not (isinstance(levels, list) and levels and all(
            isinstance(lv, dict) and isinstance(lv.get("capacity_bytes"), (int, float))
            and isinstance(lv.get("bandwidth_bytes_per_s"), (int, float)) for lv in levels)):
        raise NarrowpathError(f"{path}: levels: expected a non-empty list of {{name, capacity_bytes, "
                              f"bandwidth_bytes_per_s}}, got {levels!r}"[:300])
    return data


def check_args(args) -> None:
    """Refuse bad flags, and a missing PyTorch for the collectives probe, before any probe runs (a full probe
    takes minutes)."""
    from narrowpath.cli.common import require_extra
    if args.what in ("collectives", "all"):
        require_extra("torch", "measure", f"`probe {args.what}`" + (" (its collectives part)" if args.what == "all"
                                                                    else ""))
    if not 2 <= args.ranks <= MAX_LOCAL_RANKS:
        raise NarrowpathError(f"--ranks must be from 2 to {MAX_LOCAL_RANKS} local processes, got {args.ranks}")
    if args.repeats is not None and args.repeats < 1:
        raise NarrowpathError(f"--repeats must be >= 1, got {args.repeats}")
    if args.batch < 1:
        raise NarrowpathError(f"--batch must be >= 1, got {args.batch}")
    if args.max_bytes is not None:
        # the memory and locality sweeps start at 64 KiB of working set and 256 KiB of weights
        low = 256 * 1024 if args.what in ("memory", "locality", "all") else 1
        limit = (physical_memory_bytes() or math.inf) / 2  # 0 = the OS does not say
        if not (math.isfinite(args.max_bytes) and low <= args.max_bytes <= limit):
            raise NarrowpathError(f"--max-bytes must be from {low} to half this machine's memory ({limit:.3g}) "
                                  f"for `probe {args.what}`, got {args.max_bytes}")
    if args.tier is not None and args.tier not in TIER_NAMES:
        raise NarrowpathError(f"--tier {args.tier!r}: must be one of {', '.join(TIER_NAMES)}")
    if args.backend is not None and args.what in ("collectives", "all"):
        try:
            from torch.distributed import Backend
        except ImportError:
            Backend = None
        known = getattr(Backend, "backend_list", None)
        if known and args.backend.lower() not in known:
            raise NarrowpathError(f"--backend {args.backend!r}: torch.distributed knows "
                                  f"{', '.join(k for k in known if k not in ('undefined', 'fake'))}")
    if args.ops is not None and not all(o.strip() for o in args.ops.split(",")):
        raise NarrowpathError(f"--ops: empty name in {args.ops!r}; give e.g. all_reduce,all_gather")
    from narrowpath.cli.common import check_output_dir, check_output_file, refuse_inputs_as_outputs
    check_output_file("--output", args.output)
    check_output_dir("--plots", args.plots)
    refuse_inputs_as_outputs({"--output": args.output}, [args.memory_json])


def run(args) -> int:
    check_args(args)
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
        from narrowpath.cli.common import atomic_write_text
        atomic_write_text("--output", args.output, json.dumps(result, indent=1))
        print(f"wrote {args.output}", file=sys.stderr)
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
        written = []
        from narrowpath.cli.common import atomic_dir, moved
        with atomic_dir("--plots", args.plots) as tmp:
            for k, v in parts.items():
                if k == "locality":
                    written.append(plots.plot_locality(v, tmp, levels=v.get("levels_used")))
                else:
                    written.append(getattr(plots, f"plot_{k}")(v, tmp))
            written = moved(written, tmp, args.plots)
        print("wrote plots: " + ", ".join(str(p) for p in written), file=sys.stderr)
