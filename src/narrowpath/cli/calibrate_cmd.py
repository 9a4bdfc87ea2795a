"""`narrowpath calibrate`: fit a calibration profile YAML from probe JSON results and/or nccl-tests logs."""
from __future__ import annotations

import json
import math
import sys

import yaml

from narrowpath.errors import NarrowpathError, shown
from narrowpath.measure.busbw import NCCL_TEST_BINARIES
from narrowpath.spec.device import DTYPES
from narrowpath.spec.system import TIER_NAMES


def register(sub) -> None:
    p = sub.add_parser("calibrate", help="fit a calibration profile from probe results and nccl-tests logs",
                       description="Fit a calibration profile (matrix efficiency and its size ramp, memory levels, "
                       "collective alpha and bus-bandwidth efficiency per tier) from `narrowpath probe -o` results "
                       "and nccl-tests logs, with the residual of each fit; use it with --profile FILE. A probe of "
                       "the host CPU is this machine's profile: --device ID only for a probe run on that device.")
    p.add_argument("results", nargs="*", metavar="RESULT.json", help="outputs of `narrowpath probe ... -o`")
    p.add_argument("--nccl-log", action="append", default=[], metavar="FILE",
                   help="an nccl-tests output log (repeatable); a file holding several tests (one "
                                                      "run after another) gives each its own fit")
    p.add_argument("--op", help="collective of the nccl-tests logs that do not name their test (e.g. all_reduce); "
                                "a log naming another test is refused")
    p.add_argument("--ranks", type=int, help="ranks of the nccl-tests logs that list none ('# Rank' lines); a log "
                                             "listing another number is refused")
    p.add_argument("--tier", default="scale_up", help="tier the nccl-tests logs measure (default scale_up)")
    p.add_argument("--device", metavar="ID", help="catalog device: its peaks turn rates into efficiencies")
    p.add_argument("--system", metavar="ID", help="catalog system: its tier bandwidths are the line rates")
    p.add_argument("--peak", action="append", default=[], metavar="DTYPE=FLOP_PER_S",
                   help="peak matrix rate, e.g. fp32=3.3e11 (overrides --device and the CPU estimate)")
    p.add_argument("--line-rate", action="append", default=[], metavar="TIER=BYTES_PER_S",
                   help="tier line rate per GPU, e.g. scale_up=300e9 (overrides --system)")
    p.add_argument("--base", metavar="ID|FILE", help="profile supplying every figure not measured "
                                                    "(e.g. the device's shipped profile)")
    p.add_argument("--name", help="profile id (default: the device)")
    p.add_argument("--output", "-o", required=True, metavar="FILE", help="profile YAML to write")
    p.add_argument("--json", action="store_true", help="print the fits as JSON")
    p.set_defaults(func=run)


def _pairs(items: list[str], what: str, names: tuple[str, ...] | None = None) -> dict[str, float]:
    out = {}
    for item in items:
        key, sep, val = item.partition("=")
        try:
            out[key.strip()] = float(val)
        except ValueError:
            raise NarrowpathError(f"{what}: expected NAME=NUMBER, got {item!r}") from None
        if not sep or not key.strip() or not (math.isfinite(out[key.strip()]) and out[key.strip()] > 0):
            raise NarrowpathError(f"{what}: expected NAME=POSITIVE_NUMBER, got {item!r}")
        if names is not None and key.strip() not in names:
            raise NarrowpathError(f"{what}: unknown name {key.strip()!r} in {item!r}; known: {', '.join(names)}")
    return out


def _load_results(paths: list[str]) -> dict[str, list[dict]]:
    found: dict[str, list[dict]] = {"compute": [], "memory": [], "collectives": []}
    from narrowpath.cli.probe_cmd import read_probe_json
    from narrowpath.measure.profile import check_probe_result
    for path in paths:
        data = read_probe_json(path)
        parts = [data.get(k) for k in ("compute", "memory", "locality", "collectives")] \
            if data.get("probe") == "all" else [data]
        if not any(parts):
            raise NarrowpathError(f"{path}: not a narrowpath probe result (no `probe` key, or `probe all` with no "
                                  "part): nothing to fit")
        for part in parts:
            if part is not None and not isinstance(part, dict):
                raise NarrowpathError(f"{path}: not a narrowpath probe result (a part is a {type(part).__name__})")
            if part and part.get("probe") in found:
                check_probe_result(part, path)
                found[part["probe"]].append({**part, "_file": path})
            elif part and part.get("probe") != "locality":
                raise NarrowpathError(f"{path}: not a narrowpath probe result (probe = {shown(part.get('probe'))})")
    return found


def _host_parts_for_a_device(found: dict[str, list[dict]], args) -> list[str]:
    """A profile for a catalog device (--device) or system (--system) needs measurements taken on it. A GEMM sweep
    of the host CPU is refused (fitted "as" an A100 it would claim an A100 runs at 0.02 % of its peak); a memory
    probe of the host (NumPy: host DRAM, not the device's HBM) and, with --system, collectives over host loopback
    (gloo) are left out, each with a warning line returned; a GPU probe whose GPU name resolves to another catalog
    device is warned about (an A100's HBM read against an H200's would say 0.40)."""
    warnings = []
    if args.device:
        from narrowpath.catalog import store
        from narrowpath.catalog.store import canonical_id, entries
        dev = store.device(args.device)
        for res in found["compute"]:
            if not any(s.get("backend") == "torch-cuda" for s in res["samples"]):
                best = max(res["samples"], key=lambda s: s["flops_per_s"])
                peak = dev.peak_matrix_flop_per_s.get(best["dtype"]) or dev.matrix_peak("bf16")
                raise NarrowpathError(
                    f"--device {args.device}: {res['_file']} measured GEMMs on the host CPU ({res.get('device')}, "
                    f"{best['backend']}), not on an {args.device}: its best {best['flops_per_s'] / 1e9:.1f} GFLOP/s "
                    f"{best['dtype']} is {best['flops_per_s'] / peak:.2%} of the {args.device}'s peak. Run the probe "
                    "on that device, or drop --device to fit this machine's own profile")
        for res in [*found["compute"], *found["memory"]]:
            other = canonical_id("devices", str(res.get("device", "")))
            if other in entries("devices") and other != canonical_id("devices", args.device):
                warnings.append(f"{res['_file']} was measured on {res.get('device')} ({other}), not on an "
                                f"{args.device}: its efficiencies are read against the {args.device}'s peaks")
        if any(res.get("backend") != "torch-cuda" for res in found["memory"]):
            found["memory"] = [res for res in found["memory"] if res.get("backend") == "torch-cuda"]
            warnings.append(f"memory probe of the host left out: it measures host memory ({args.device} HBM needs "
                            "`narrowpath probe memory` run where PyTorch sees the GPU); vector_bw_efficiency and "
                            "memory_levels keep the base/default values")
    if args.system:
        host = [r for r in found["collectives"] if r.get("backend") != "nccl"]
        if host:
            found["collectives"] = [r for r in found["collectives"] if r.get("backend") == "nccl"]
            warnings.append(f"collectives probe over {host[0].get('backend')} (host loopback) left out: it does not "
                            f"measure the {args.system} links whose line rates --system gives (--line-rate states "
                            "the loopback's own)")
    return warnings


def check_loads_back(text: str, output: str) -> None:
    """The profile text as the reader will load it: a fit never writes a file `--profile` refuses."""
    from narrowpath.catalog.resolve import calibration_document
    from narrowpath.spec.strict_load import load_yaml
    try:
        calibration_document(load_yaml(text), output)
    except NarrowpathError as exc:
        raise NarrowpathError(f"--output {output}: the fitted profile would not load back ({exc}); not written") \
            from None


def run(args) -> int:
    from narrowpath.measure.nccl_tests import describe_test, read_nccl_tests_logs
    from narrowpath.measure.profile import (build_profile, profile_document, tier_points_from_log,
                                            tier_points_from_probe, written_fits)
    from narrowpath.report.measure_tables import format_fit_report
    from narrowpath.cli.common import atomic_write_text, check_output_file, refuse_inputs_as_outputs
    if not args.results and not args.nccl_log:
        raise NarrowpathError("calibrate needs probe results (RESULT.json) and/or --nccl-log FILE")
    if args.tier not in TIER_NAMES:
        raise NarrowpathError(f"--tier {args.tier!r}: must be one of {', '.join(TIER_NAMES)}")
    if args.op is not None and args.op not in NCCL_TEST_BINARIES.values():
        raise NarrowpathError(f"--op {args.op!r}: must be one of {', '.join(NCCL_TEST_BINARIES.values())}")
    if args.ranks is not None and args.ranks < 2:
        raise NarrowpathError(f"--ranks must be >= 2, got {args.ranks}")
    check_output_file("--output", args.output)
    refuse_inputs_as_outputs({"--output": args.output}, [*args.results, *args.nccl_log, args.base])
    found = _load_results(args.results)
    warnings = _host_parts_for_a_device(found, args)
    peaks, peak_mem = {}, 0.0
    if args.device:
        from narrowpath.catalog import store
        dev = store.device(args.device)
        peaks, peak_mem = dict(dev.peak_matrix_flop_per_s), dev.level("hbm").bw_bytes_per_s
    peaks.update(_pairs(args.peak, "--peak", (*DTYPES, "fp64")))
    lines = {}
    if args.system:
        from narrowpath.catalog import store
        lines = {t.name: t.bw_bytes_per_s_per_gpu for t in store.system(args.system).tiers}
    lines.update(_pairs(args.line_rate, "--line-rate", TIER_NAMES))
    points = [tp for res in found["collectives"] for tp in tier_points_from_probe(res)]
    for path in args.nccl_log:
        logs = read_nccl_tests_logs(path)  # a file may hold several tests: each is fitted on its own
        points += [tier_points_from_log(log, tier=args.tier, op=args.op, num_ranks=args.ranks,
                                        name=describe_test(path, log, len(logs))) for log in logs]
    compute = found["compute"][-1] if found["compute"] else None
    memory = found["memory"][-1] if found["memory"] else None
    device = args.device or (compute or memory or {}).get("device") or "measured"
    base = None
    if args.base:
        from narrowpath.catalog.resolve import calibration_from
        base = calibration_from(args.base)
    if not (compute or memory or points):
        why = f": {'; '.join(warnings)}" if warnings else ""
        raise NarrowpathError(f"calibrate: nothing left to fit (no compute, memory or collective measurement){why}")
    rep = build_profile(name=args.name or device, device=device, compute=compute, memory=memory,
                        tier_points=points, peaks=peaks, peak_mem_bw_bytes_per_s=peak_mem, line_rates=lines,
                        base=base)
    if not written_fits(rep):
        raise NarrowpathError(f"calibrate: nothing to write to {args.output}: "
                              + "; ".join(warnings + rep.warnings or ["no figure was fitted"]))
    text = yaml.safe_dump(profile_document(rep.profile), sort_keys=False, width=120)
    check_loads_back(text, args.output)
    atomic_write_text("--output", args.output, text)
    for w in warnings + rep.warnings:
        print(f"narrowpath calibrate: warning: {w}", file=sys.stderr)
    if args.json:
        print(json.dumps({"output": args.output, "fits": rep.lines, "profile": rep.profile}, indent=1))
    else:
        print(format_fit_report(rep.lines, args.output))
    return 0
