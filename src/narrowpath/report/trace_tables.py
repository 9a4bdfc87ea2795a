"""Terminal tables of a trace report (and of its comparison with a prediction), units in every header."""
from __future__ import annotations

import math

from typing import TYPE_CHECKING

from narrowpath.report.console import human_bytes, human_time, table

if TYPE_CHECKING:  # imported for the annotations only: a trace without --against never loads the comparison
    from narrowpath.trace.analyze import TraceReport
    from narrowpath.trace.compare import Comparison


def _gbps(v: float) -> str:
    return f"{v / 1e9:.2f}" if math.isfinite(v) else "-"


def _bytes(v: float) -> str:
    return human_bytes(v) if math.isfinite(v) else "-"


MAX_KERNEL_ROWS = 8
"""Kernel categories shown one per row; the rest share one '+N more' row, so the share column sums to 100."""


def _kernel_rows(kernels) -> list[list]:
    """The largest categories, then one row adding up the others (count, time, share)."""
    rows = [[k.category, k.num_kernels, human_time(k.total_s), k.share_pct, k.top_kernel[:50]]
            for k in kernels[:MAX_KERNEL_ROWS]]
    rest = kernels[MAX_KERNEL_ROWS:]
    if rest:
        rows.append([f"+{len(rest)} more categories", sum(k.num_kernels for k in rest),
                     human_time(sum(k.total_s for k in rest)), sum(k.share_pct for k in rest),
                     ", ".join(k.category for k in rest)[:50]])
    return rows


def format_report(report: TraceReport) -> str:
    out = []
    rows = []
    for r in report.ranks:
        p = r.breakdown.pct()
        rows.append([r.rank, human_time(r.breakdown.span_s), p["compute"], p["exposed_comm"], p["memcpy"],
                     p["idle"], r.breakdown.overlap_pct])
    out.append("Temporal breakdown, % of the device span (HTA definitions; whole trace minus the last "
               "ProfilerStep; memcpy includes Sync waits alone on the GPU)")
    out.append(table(["rank", "device span", "compute (%)", "exposed comm (%)", "memcpy (%)", "idle (%)",
                      "comm overlapped (%)"], rows))
    for r in report.ranks:
        host = " [CPU-only trace: host operators stand in for device work]" if r.host_mode else ""
        out.append(f"\nRank {r.rank} ({r.device_name or 'device unknown'}) — {r.path}{host}")
        if r.steps:
            out.append(table(["step", "CPU time", "device time", "compute (%)", "exposed comm (%)", "memcpy (%)",
                              "idle (%)", "comm overlapped (%)"],
                             [[s.step, human_time(s.cpu_dur_s), human_time(s.breakdown.span_s),
                               *(s.breakdown.pct()[k] for k in ("compute", "exposed_comm", "memcpy", "idle")),
                               s.breakdown.overlap_pct] for s in r.steps]))
            if len(r.steps) >= 2:
                out.append(f"  device time: a step's slice of the GPU timeline, from its first kernel to the next "
                           f"step's; the last step ({r.steps[-1].step}) runs to its last kernel's end and is left "
                           f"out of the whole-trace figures, as in HTA")
        if r.collectives:
            out.append(table(["collective", "group (ranks)", "count", "min msg", "max msg", "total time",
                              "median busbw (GB/s)", "max busbw (GB/s)"],
                             [[c.kind, c.group_size or "?", c.count, _bytes(c.min_message_bytes),
                               _bytes(c.max_message_bytes), human_time(c.total_s),
                               _gbps(c.median_busbw_bytes_per_s), _gbps(c.max_busbw_bytes_per_s)]
                              for c in r.collectives]))
        out.append(table(["kernel category", "count", "time", "share (%)", "top kernel"], _kernel_rows(r.kernels)))
        idle = r.idle.pct()
        out.append("  idle gaps: " + ", ".join(f"{k} {v:.1f}%" for k, v in idle.items())
                   + f" of {human_time(r.idle.total_s)} over {r.idle.num_gaps} gaps (per stream)")
        cp = r.critical_path
        parts = ", ".join(f"{k} {v:.1f}%" for k, v in cp.pct().items() if v >= 0.05)
        what = (f"step {cp.step}'s work (CPU step start to its last kernel's end)" if cp.step is not None
                else "the whole trace")
        out.append(f"  critical path of {what}, {human_time(cp.span_s)}: {parts}")
    s = report.stragglers
    if s is not None:
        out.append(f"\nStragglers: {s.num_matched} collectives matched across ranks "
                   f"{', '.join(map(str, s.ranks))}" + (f" (counts differ for {', '.join(s.unmatched_kinds)};"
                                                        " matched up to the shortest)" if s.unmatched_kinds else ""))
        if s.num_dropped or not s.groups_known:
            why = "" if s.groups_known else " (the traces carry no process groups)"
            out.append(f"  matched by order within each kind{why}; {s.num_dropped} order-matched set(s) dropped: "
                       "their intervals do not overlap on every rank, so they are not one collective (sampled or "
                       "misaligned traces)")
        out.append(table(["rank", "arrived last (count)", "mean lateness", "max lateness", "mean step"],
                         [[rk, s.last_arrival_count[rk], human_time(s.mean_lateness_s[rk]),
                           human_time(s.max_lateness_s[rk]),
                           human_time(s.mean_step_s[rk]) if s.mean_step_s[rk] == s.mean_step_s[rk] else "-"]
                          for rk in s.ranks]))
    return "\n".join(out)


def format_comparison(cmp: Comparison, scenario_name: str) -> str:
    out = [f"\nObserved vs predicted ({scenario_name})"]
    rows = [["step time", human_time(cmp.observed_step_s), human_time(cmp.predicted_step_s)]]
    for k in ("compute", "exposed_comm", "memcpy", "idle"):
        rows.append([f"{k} (%)", f"{cmp.observed_pct[k]:.1f}", f"{cmp.predicted_pct[k]:.1f}"])
    rows.append(["comm overlapped (%)", f"{cmp.observed_overlap_pct:.1f}", f"{cmp.predicted_overlap_pct:.1f}"])
    out.append(table(["quantity", "observed", "predicted"], rows))
    kinds = sorted({c.kind for c in cmp.observed_collectives} | {c.kind for c in cmp.predicted_collectives})
    obs = {c.kind: c for c in cmp.observed_collectives}
    pred = {c.kind: c for c in cmp.predicted_collectives}
    crow = []
    for k in kinds:
        o, p = obs.get(k), pred.get(k)
        crow.append([k, f"{o.count_per_step:.3g}" if o else "-", f"{p.count_per_step:.3g}" if p else "-",
                     _bytes(o.max_message_bytes) if o else "-", _bytes(p.max_message_bytes) if p else "-",
                     human_time(o.time_each_s) if o else "-", human_time(p.time_each_s) if p else "-"])
    if crow:
        out.append(table(["collective", "per step (obs)", "per step (pred)", "max msg (obs)", "max msg (pred)",
                          "time each (obs)", "time each (pred)"], crow))
    if cmp.predicted_kernel_s:
        out.append(table(["kernel class", "per step (obs)", "per step (pred)", "obs / pred"],
                         [[c, human_time(cmp.observed_kernel_s.get(c, 0.0)), human_time(p),
                           f"{cmp.observed_kernel_s.get(c, 0.0) / p:.2f}" if p > 0 else "-"]
                          for c, p in cmp.predicted_kernel_s.items()]))
        out.append("  (predicted at the calibration profile's rates, which for a fitted profile are whole-step rates "
                   "of published multi-GPU runs, not kernel rates: a class can differ where the step time agrees; "
                   "observed: the rank with the most kernel time, predicted: the most loaded stage)")
    out.append("Differences that matter:" if cmp.differences else "No difference beyond the thresholds.")
    out += [f"  - {d}" for d in cmp.differences]
    return "\n".join(out)
