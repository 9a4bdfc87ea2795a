"""Terminal tables of the measure probes and of `narrowpath calibrate` fits.

The collectives table copies nccl-tests' layout (src/common.cu print formats) so that it can be read back by
`narrowpath.measure.nccl_tests.parse_nccl_tests_log` and compared by eye with real nccl-tests output.
"""
from __future__ import annotations

from typing import Any, Mapping

from narrowpath.measure.locality_probe import MAX_MATCH_RATIO
from narrowpath.measure.segment import NOISY_SPREAD

_OP_BINARY = {"all_reduce": "all_reduce_perf", "all_gather": "all_gather_perf",
              "reduce_scatter": "reduce_scatter_perf", "all_to_all": "alltoall_perf", "send_recv": "sendrecv_perf"}


def _mib(x: float) -> str:
    return f"{x / 2**20:.3f}" if x < 2**20 else f"{x / 2**20:.1f}"


def format_compute(result: Mapping[str, Any]) -> str:
    lines = [f"# compute probe on {result['device']} (median of {result['repeats']} after warm-up)",
             f"{'backend':<11} {'dtype':<5} {'n':>6} {'GFLOP':>10} {'time (ms)':>10} {'GFLOP/s':>9} {'eff':>6}"]
    for s in result["samples"]:
        eff = f"{s['efficiency']:.2f}" if s.get("efficiency") is not None else "-"
        lines.append(f"{s['backend']:<11} {s['dtype']:<5} {s['n']:>6} {s['flop'] / 1e9:>10.3f} "
                     f"{s['time_s'] * 1e3:>10.3f} {s['flops_per_s'] / 1e9:>9.1f} {eff:>6}")
    lines.append("best (GFLOP/s): " + ", ".join(f"{dt} {v / 1e9:.1f}" for dt, v in result["best_flops_per_s"].items()))
    for dt, p in result["peaks"].items():
        lines.append(f"peak {dt}: {p['peak_flops_per_s'] / 1e9:.1f} GFLOP/s ({p['reason']})")
    return "\n".join(lines)


def format_memory(result: Mapping[str, Any]) -> str:
    how = ("CUDA-graph replays" if result.get("backend") == "torch-cuda"
           else f"{result.get('threads', 1)} thread")
    lines = [f"# memory probe on {result['device']} ({result['dtype']}, {how}, "
             f"STREAM byte counting; level bandwidth = '{result['level_kernel']}' kernel)",
             f"{'level':<6} {'capacity (MiB)':>15} {'add (GB/s)':>11} {'read':>7} {'write':>7} {'copy':>7}"]
    for lv in result["levels"]:
        lines.append(f"{lv['name']:<6} {_mib(lv['capacity_bytes']):>15} {lv['bandwidth_bytes_per_s'] / 1e9:>11.1f} "
                     f"{lv['read_bandwidth_bytes_per_s'] / 1e9:>7.1f} {lv['write_bandwidth_bytes_per_s'] / 1e9:>7.1f} "
                     f"{lv['copy_bandwidth_bytes_per_s'] / 1e9:>7.1f}")
    for lv in result["levels"]:
        if lv.get("rms_rel_spread", 0.0) > NOISY_SPREAD:
            lines.append(f"warning: {lv['name']}: the '{result['level_kernel']}' samples spread "
                         f"{lv['rms_rel_spread']:.0%} (RMS) about its level; a noisy sweep: probe again on a quiet "
                         "machine")
    if result.get("backend") == "torch-cuda":
        lines.append(f"device L2 (reported): {_mib(result.get('l2_cache_bytes', 0))} MiB")
        return "\n".join(lines)
    lines.append("detected boundary vs OS-reported cache:")
    for c in result["comparison"]:
        lines.append(f"  {c['level']:<6} detected {_mib(c['detected_capacity_bytes']):>9} MiB   "
                     f"OS {c['os_cache']} {_mib(c['os_capacity_bytes']):>9} MiB   ratio {c['ratio']:.2f}")
        if c.get("note"):
            lines.append(f"         ({c['note']})")
    named = {c["level"] for c in result["comparison"]}
    for lv in result["levels"][:-1]:
        if lv["name"] not in named:
            lines.append(f"  {lv['name']:<6} detected {_mib(lv['capacity_bytes']):>9} MiB   no OS cache of its own "
                         "(a step inside a cache, or a cache the OS does not list)")
    if not result["levels"][:-1]:
        lines.append("  (no cache boundary detected, or the OS reports no caches)")
    return "\n".join(lines)


def format_locality(result: Mapping[str, Any]) -> str:
    lines = [f"# locality probe on {result['device']}: h <- h.W, same W every step, batch {result['batch']}, fp32",
             f"{'H':>6} {'weights (MiB)':>14} {'time/step (us)':>15} {'ps/FLOP':>8} {'GFLOP/s':>8}"]
    for s in result["samples"]:
        lines.append(f"{s['hidden']:>6} {_mib(s['weight_bytes']):>14} {s['time_per_step_s'] * 1e6:>15.1f} "
                     f"{s['s_per_flop'] * 1e12:>8.2f} {s['flops_per_s'] / 1e9:>8.1f}")
    lines.append("cliff: predicted (measured cache capacity) vs measured (time per FLOP steps up):")
    for c in result["comparison"]:
        meas = (f"measured {_mib(c['measured_weight_bytes'])} MiB (H~{c['measured_hidden']:.0f}, "
                f"x{c['measured_jump']:.2f})  ratio {c['ratio']:.2f}") if c["measured_weight_bytes"] else "no cliff measured"
        lines.append(f"  {c['level']:<6} predicted {_mib(c['predicted_weight_bytes'])} MiB "
                     f"(H~{c['predicted_hidden']:.0f}, x{c['predicted_jump']:.2f})   {meas}")
    matched = {c["measured_weight_bytes"] for c in result["comparison"]}
    for m in result.get("measured_cliffs", []):
        if m["weight_bytes"] not in matched:
            lines.append(f"  {'-':<6} measured {_mib(m['weight_bytes'])} MiB (H~{m['hidden']:.0f}, x{m['jump']:.2f})   "
                         f"no predicted cliff within {MAX_MATCH_RATIO:g}x (a level the memory probe did not resolve, "
                         "or noise)")
    if not result["comparison"]:
        lines.append("  (no memory levels given: run `probe memory` first or use `probe all`)")
    return "\n".join(lines)


def _time_str(us: float) -> str:
    """nccl-tests: %7.0f from 10 ms, %7.1f from 100 us, else %7.2f."""
    return f"{us:7.0f}" if us >= 1e4 else f"{us:7.1f}" if us >= 100 else f"{us:7.2f}"


def format_nccl_table(rows: list[Mapping[str, Any]], *, op: str, note: str = "") -> str:
    """One op's rows in nccl-tests layout (out-of-place columns; `#wrong` is N/A: results are not checked)."""
    lines = [f"# Collective test starting: {_OP_BINARY.get(op, op)}"]
    if note:
        lines.append(f"# {note}")
    lines += ["#",
              "#                                                              out-of-place",
              "#       size         count      type   redop    root     time   algbw   busbw #wrong",
              "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)"]
    for r in rows:
        lines.append(f"{int(r['size_bytes']):12d}  {int(r['count']):12d}  {r['dtype']:>8}  {r['redop']:>6}  "
                     f"{int(r['root']):6d}  {_time_str(r['time_s'] * 1e6)}  {r['algbw_bytes_per_s'] / 1e9:6.2f}  "
                     f"{r['busbw_bytes_per_s'] / 1e9:6.2f}  {'N/A':>5}")
    avg = sum(r["busbw_bytes_per_s"] for r in rows) / max(1, len(rows)) / 1e9
    lines += ["# Out of bounds values : 0 OK", f"# Avg bus bandwidth    : {avg:g} ", "#"]
    return "\n".join(lines)


def format_collectives(result: Mapping[str, Any]) -> str:
    note = (f"narrowpath probe collectives: {result['backend']}, {result['num_ranks']} ranks, tier "
            f"{result['tier']}, {result['device']}")
    blocks = []
    for op in dict.fromkeys(r["op"] for r in result["samples"]):
        blocks.append(format_nccl_table([r for r in result["samples"] if r["op"] == op], op=op, note=note))
    lines = ["alpha-beta fit per op (t = steps*alpha + size*factor/busbw), one line and two-regime (in-cache up to "
             "the knee, a larger per-byte cost beyond); held-out: fit on every other size, predict the sizes "
             "between (target: two-regime mean <= 20 %):",
             f"{'op':<15} {'alpha (us)':>10} {'busbw (GB/s)':>13} {'rms resid':>10} {'line held-out mean':>19} "
             f"{'max':>7} {'knee (MiB)':>11} {'busbw>knee':>11} {'2-regime held-out mean':>23} {'max':>7}"]
    pct = lambda f, k: f"{f[k] * 100:.1f} %" if k in f else "-"  # noqa: E731
    for op, f in result["fits"].items():
        kn = f.get("knee") or {}
        knee = f"{kn['knee_bytes'] / 2**20:.2f}" if kn.get("knee_bytes") else "none"
        beyond = f"{kn['busbw_beyond_knee_bytes_per_s'] / 1e9:.3f}" if kn.get("knee_bytes") else "-"
        lines.append(f"{op:<15} {f['alpha_s'] * 1e6:>10.2f} {f['busbw_bytes_per_s'] / 1e9:>13.3f} "
                     f"{f['rms_rel_residual'] * 100:>9.1f}% {pct(f, 'line_heldout_mean_rel_error'):>19} "
                     f"{pct(f, 'line_heldout_max_rel_error'):>7} {knee:>11} {beyond:>11} "
                     f"{pct(f, 'heldout_mean_rel_error'):>23} {pct(f, 'heldout_max_rel_error'):>7}")
    lines.append("time = lower quartile of per-op times pooled over the passes (each pass visits every (op, size) in "
                 "shuffled order; mean over ranks); the nccl-tests batch mean is `batch_mean_time_s` in --json")
    return "\n\n".join(blocks + ["\n".join(lines)])


def format_fit_report(lines: list[Mapping[str, Any]], path: str) -> str:
    """The fits written to the profile, then those measured but not written (`written: False`, see the warnings)."""
    out = [f"calibration profile written to {path}", f"{'fit':<34} {'value':>12} {'rms resid':>10} {'points':>7}"]
    row = lambda ln: (f"{ln['fit']:<34} {ln['value']:>12.4g} {ln['rms_rel_residual'] * 100:>9.1f}% "  # noqa: E731
                      f"{ln['points']:>7}")
    out += [row(ln) for ln in lines if ln.get("written", True)]
    left = [row(ln) for ln in lines if not ln.get("written", True)]
    if left:
        out += ["measured but not written (see the warnings):", *left]
    return "\n".join(out)
