"""Analysis → terminal text: the five accounts, three budgets, verdict and energy, in the order of issue 3."""
from __future__ import annotations

import math

from narrowpath.analysis import Analysis
from narrowpath.report.console import human_bytes, table
from narrowpath.report.prediction import critical_title, format_prediction


def _ms(t: float | None) -> str:
    return "-" if t is None else f"{t * 1e3:,.2f}"


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x * 100:.1f}"


def _h(t: float) -> str:
    return "inf" if math.isinf(t) else f"{t / 3600:.2f}"


def _min(t: float) -> str:
    return "inf" if math.isinf(t) else f"{t / 60:.1f}"


def format_accounts(a: Analysis) -> list[str]:
    L = ["", "  1. DATA-MOVEMENT LEDGER (per GPU per step; useful FLOP = model FLOPs / GPUs = "
         f"{a.context.useful_flop_per_rank:.3g})"]
    L.append(table(["level", "bytes/step (GB)", "bytes/useful FLOP", "bw (GB/s)", "time at bw (ms)", "of step (%)",
                    "modelled (ms)"],
                   [[r.level, r.bytes_per_step / 1e9, r.bytes_per_useful_flop, r.bw_bytes_per_s / 1e9,
                     _ms(r.time_at_bw_s), _pct(r.share_of_step), _ms(r.modelled_s)] for r in a.data_movement]))
    L += ["", "  2. COLLECTIVE INVENTORY (per step, one rank of the critical stage)"]
    L.append(table(["pattern", "kind", "axis", "group", "tiers", "count", "min msg (MB)", "max msg (MB)",
                    "each (ms)", "total (ms)", "critical (ms)"],
                   [[r.name, r.kind, r.axis, r.group_size, "+".join(r.tiers) or "-", f"{r.count_per_step:g}",
                     r.min_message_bytes / 1e6, r.max_message_bytes / 1e6, _ms(r.time_each_s), _ms(r.total_s),
                     _ms(r.critical_path_s)] for r in a.collectives]))
    tot = sum(r.total_s for r in a.collectives)
    crit = sum(r.critical_path_s for r in a.collectives)
    L.append(f"  total {tot * 1e3:,.1f} ms of communication, {crit * 1e3:,.1f} ms on the critical path")
    o = a.overlap
    L += ["", "  3. OVERLAP (hidden vs exposed; slowdown = compute slowed by sharing the chip)"]
    if o.rows:
        L.append(table(["transfer", "phase", "total (ms)", "hidden (ms)", "exposed (ms)", "slowdown (ms)",
                        "net saving (ms)"],
                       [[r.name, r.phase, _ms(r.total_s), _ms(r.hidden_s), _ms(r.exposed_s),
                         _ms(r.compute_slowdown_s), _ms(r.net_saving_s)] for r in o.rows]))
    L.append(f"  step with overlap {o.step_s:.4g} s vs serialised {o.serialised_step_s:.4g} s: overlap buys "
             f"{o.reduction_s * 1e3:,.1f} ms ({_pct(o.reduction_fraction)} %)")
    t = a.topology
    L += ["", "  4. TOPOLOGY FIT"]
    L.append(table(["axis", "degree", "tiers", "domains", "nodes", "groups/node", "GB/step per GPU"],
                   [[x.axis, x.degree, "+".join(x.tiers), x.domains, x.nodes, x.groups_per_node,
                     sum(x.bytes_per_step.values()) / 1e9] for x in t.axes]))
    L.append(table(["tier", "GB/step per GPU", "busiest-link util (%)", "busy (% of step)"],
                   [[x.tier, x.bytes_per_step / 1e9, _pct(x.utilisation), _pct(x.busy_fraction)] for x in t.tiers]))
    L += [f"  FLAG: {f}" for f in t.flags] or ["  no high-frequency traffic on a far tier"]
    L += ["", "  5. SCALING (strong: fixed global batch; weak: fixed batch per replica)"]
    L.append(table(["mode", "GPUs", "dp", "gbs", "mbs", "step (s)", "efficiency (%)", "comm (% step)", "energy/step (kJ)",
                    "tokens/s", "interruptions/day", "fits"],
                   [[s.mode, s.num_gpus, s.dp, s.gbs, s.mbs, "-" if s.step_s is None else s.step_s,
                     _pct(s.efficiency), _pct(s.communication_share),
                     "-" if s.energy_per_step_j is None else s.energy_per_step_j / 1e3,
                     "-" if s.tokens_per_s is None else f"{s.tokens_per_s:,.0f}", f"{s.interruptions_per_day:.3f}",
                     ("yes" if s.fits else "NO") + (f" ({s.note})" if s.note else "")] for s in a.scaling]))
    return L


def format_budgets(a: Analysis) -> list[str]:
    d = a.distance
    L = ["", f"  DISTANCE BUDGET ({critical_title(a.prediction.scenario.plan, d.stage)})"]
    L.append(table(["item", "size (GB)", "lives in", "accesses/step", "moved/step (GB)", "working set (MB)",
                    "could live in", "note"],
                   [[i.item, i.bytes_per_rank / 1e9, i.level, f"{i.accesses_per_step:.3g}",
                     i.bytes_moved_per_step / 1e9, i.working_set_bytes / 1e6, i.nearer_level or "-", i.note]
                    for i in d.items]))
    if d.stage_note:
        L.append(f"  note: {d.stage_note}")
    if d.persistence is not None:
        c = d.persistence
        L.append(f"  persistent-RNN: FP16 layer weights fit {c.usable_fraction:.0%} of {human_bytes(c.sram_bytes)} SRAM "
                 f"up to hidden {c.hidden_limit}; throughput cliff at the limit: x{c.cliff_ratio:.2f}")
        L.append(table(["hidden", "layer weights (MB)", "fits SRAM", "step (ms)", "core step (ms)",
                        "useful TFLOP/s/GPU"],
                       [[q.hidden, q.layer_weight_bytes / 1e6, "yes" if q.fits_sram else "no", _ms(q.step_s),
                         _ms(q.core_step_s), q.useful_flop_per_s_per_gpu / 1e12] for q in c.points]))
    c = a.communication
    L += ["", "  COMMUNICATION BUDGET"]
    L.append(table(["tier", "bytes/step (GB)", "bytes/useful FLOP", "modelled (ms)", "exposed (ms)"],
                   [[x.tier, x.bytes_per_step / 1e9, x.bytes_per_useful_flop, _ms(x.modelled_s), _ms(x.exposed_s)]
                    for x in c.tiers]))
    L.append(f"  dominant pattern: {c.dominant} ({_ms(c.dominant_exposed_s)} ms on the critical path)"
             if c.dominant and c.dominant_exposed_s > 0 else "  no communication is exposed on the critical path")
    L.append(f"  gradient compression x{c.compression_ratio:g} would save {_ms(c.compression_saving_s)} ms per step")
    for w in c.in_network_reduction + c.nearer_tier:
        L.append(f"  {w.description}: " + (w.skipped or f"step {w.step_s:.4g} s, saves {_ms(w.gain_s)} ms"))
    s = a.synchronisation
    f = s.failures
    L += ["", "  SYNCHRONISATION BUDGET"]
    L.append(f"  sync points per step: {s.sync_points_per_step:,.0f} (compute segment between them "
             f"{s.segment_s * 1e3:.3f} ms)")
    L.append(f"  jitter: normal, cv {s.jitter_cv:.1%} per segment ({s.jitter_method}): expected wait for the slowest "
             f"{s.jitter_wait_s * 1e3:,.1f} ms per step")
    L.append(f"  one node {s.slow_node_fraction * 100:g} % slower: step {s.slow_node_step_s:.4g} s "
             f"(+{(s.slow_node_step_s / a.prediction.step_time_s - 1) * 100:.1f} %)")
    L.append(f"  pipeline bubble: {s.bubble_s * 1e3:,.1f} ms ({_pct(s.bubble_fraction)} % of the step)")
    L.append(f"  failures: job MTBF {_h(f.mtbf_s)} h ({f.interruptions_per_day:.3f} interruptions/day); checkpoint "
             f"{human_bytes(f.checkpoint_bytes)} written in {f.write_s:.2f} s at {human_bytes(f.write_bw_bytes_per_s)}/s; "
             f"interval Young {_min(f.young_interval_s)} min, Daly {_min(f.daly_interval_s)} min; "
             f"waste {_pct(f.waste_fraction)} %")
    L += _simulated_sync_lines(s, a.prediction.step_time_s)
    L.append(f"  goodput (failures and jitter{', simulated' if s.simulated and s.simulated.steps else ''}): "
             f"{_pct(s.goodput)} %")
    return L


def _simulated_sync_lines(s, step_s: float) -> list[str]:
    """The event simulator's numbers for the same budget (SyncBudget.simulated), beside the closed form's."""
    sim = s.simulated
    if sim is None:
        return []
    if not sim.steps:
        return [f"  simulator: {sim.note}"]
    L = [f"  simulated ({sim.steps} steps, {sim.jitter_spec}): wait for the slowest {sim.jitter_wait_s * 1e3:,.1f} ms "
         f"per step (p99 {sim.jitter_wait_p99_s * 1e3:,.1f} ms); {sim.slow_node_spec}: step "
         f"{sim.slow_node_step_s:.4g} s (+{(sim.slow_node_step_s / step_s - 1) * 100:.1f} %)"]
    lost = sorted(((c, v) for c, v in sim.lost_time_s_by_cause if v > 0), key=lambda cv: -cv[1])[:4]
    if lost:
        L.append("  simulated lost time by cause: " + ", ".join(f"{c} {v * 1e3:,.1f} ms" for c, v in lost))
    waits = sorted(((c, v) for c, v in sim.wait_s_by_collective if v > 0), key=lambda cv: -cv[1])[:4]
    if waits:
        L.append("  simulated wait per rank at: " + ", ".join(f"{c} {v * 1e3:,.1f} ms" for c, v in waits))
    return L


def format_verdict_energy(a: Analysis) -> list[str]:
    v, e = a.verdict, a.energy
    L = ["", "  VERDICT", f"  {v.sentence}"]
    rows = [[i + 1 if w.status == "faster" else "-", w.kind, w.description
             + (f" [repaired: {'; '.join(w.repairs)}]" if w.repairs else ""),
             "-" if w.step_s is None else f"{w.step_s:.4g}",
             _ms(w.gain_s) if w.step_s is not None else "-", _pct(w.gain_fraction) if w.step_s is not None else "-",
             "-" if w.energy_per_token_j is None else f"{w.energy_per_token_j:.3g}",
             w.skipped if w.skipped.startswith("no gain:") or w.status not in ("faster", "no gain", "slower")
             else w.status] for i, w in enumerate(v.what_ifs)]
    if rows:
        L.append(table(["rank", "kind", "change", "step (s)", "gain (ms)", "gain (%)", "J/token (facility)",
                        "status"], rows))
    L += ["", "  ENERGY (whole job, one step)"]
    rows = [["arithmetic", e.flop_j / 1e3]] + [[f"data @ {k}", v / 1e3] for k, v in e.bytes_j.items() if v > 0]
    rows += [["static (idle power x time)", e.static_j / 1e3], ["total", e.total_j / 1e3]]
    L.append(table(["component", "kJ"], rows))
    L.append(f"  {e.per_token_j:.3g} J per token; average {e.avg_power_per_gpu_w:.0f} W per GPU (TDP {e.tdp_w:.0f} W); "
             f"{e.pj_per_flop:.3g} pJ/FLOP; source: {e.source}")
    if e.missing:
        L.append(f"  missing coefficients (counted as 0): {', '.join(e.missing)}")
    return L


def format_analysis(a: Analysis) -> str:
    return "\n".join([format_prediction(a.prediction, transfers=False)] + format_accounts(a) + format_budgets(a)
                     + format_verdict_energy(a))
