"""HTML sections of the five accounts, three budgets, memory, energy and the timeline of an Analysis."""
from __future__ import annotations

import math

from narrowpath.analysis import Analysis
from narrowpath.report.console import fmt_cell
from narrowpath.report.html import Raw, esc, figures, para, section, table
from narrowpath.report.prediction import breakdown_label, critical_title, rank_label
from narrowpath.report.svg import PALETTE, Series, gantt, line_chart, stacked_columns, stacked_hbar
from narrowpath.report.timeline import TRACKS, timeline_events
from narrowpath.schedule.step import BREAKDOWN_KEYS


def ms(t: float | None) -> str:
    return "-" if t is None else f"{t * 1e3:,.2f}"


def pct(x: float | None) -> str:
    return "-" if x is None else f"{x * 100:.1f}"


def gb(b: float) -> str:
    return f"{b / 1e9:,.3f}"


def g(x: float) -> str:
    return "0" if x == 0 else f"{x:.3g}"


def breakdown_section(a: Analysis) -> str:
    p = a.prediction
    segs = []
    for k in BREAKDOWN_KEYS:
        v = p.breakdown_s[k]
        if v <= 0:
            continue
        if k == "compute" and p.host_wait_s > 0:  # the GPU's wait for its host shown apart (as the console)
            segs += [(breakdown_label(p, k) + ": GPU busy", v - p.host_wait_s), ("compute: GPU waiting for the host", p.host_wait_s)]
        else:
            segs.append((breakdown_label(p, k), v))
    rows = [[Raw(f'<span class="sw" style="background:{PALETTE[i % len(PALETTE)]}"></span>{esc(name)}'),
             f"{v:.4f}", pct(v / p.step_time_s)] for i, (name, v) in enumerate(segs)]
    return section("breakdown", "Step breakdown",
                   figures(stacked_hbar(f"Step {p.step_time_s:.4g} s — where the time goes", segs, "s")),
                   table(["component", "time (s)", "share (%)"], rows))


def ledger_section(a: Analysis) -> str:
    rows = [[r.level, gb(r.bytes_per_step), g(r.bytes_per_useful_flop), f"{r.bw_bytes_per_s / 1e9:,.1f}",
             ms(r.time_at_bw_s), pct(r.share_of_step), ms(r.modelled_s), r.source] for r in a.data_movement]
    return ("<h3>1. Data-movement ledger</h3>" + para(
        f"Per GPU per step; useful FLOP = model FLOPs / GPUs = {a.context.useful_flop_per_rank:.3g}. "
        "Modelled = the time the core model charges there (network transfers split over the tiers they cross).",
        "note") + table(["level", "GB/step", "bytes/useful FLOP", "bw (GB/s)", "time at bw (ms)", "of step (%)",
                         "modelled (ms)", "source"], rows, text_cols=(7,)))


def collectives_section(a: Analysis) -> str:
    rows = [[r.name, r.kind, r.axis, r.group_size, "+".join(r.tiers) or "-", f"{r.count_per_step:g}",
             fmt_cell(r.max_message_bytes / 1e6), ms(r.time_each_s), ms(r.total_s), ms(r.critical_path_s)]
            for r in a.collectives]
    o = a.overlap
    orows = [[r.name, r.phase, ms(r.total_s), ms(r.hidden_s), ms(r.exposed_s), ms(r.compute_slowdown_s),
              ms(r.net_saving_s)] for r in o.rows]
    return ("<h3>2. Collectives on the critical path</h3>"
            + table(["pattern", "kind", "axis", "group", "tiers", "count", "max msg (MB)", "each (ms)", "total (ms)",
                     "critical (ms)"], rows)
            + "<h3>3. Overlap</h3>"
            + para(f"Step with overlap {o.step_s:.4g} s vs serialised {o.serialised_step_s:.4g} s: overlap buys "
                   f"{o.reduction_s * 1e3:,.1f} ms ({pct(o.reduction_fraction)} %).")
            + (table(["transfer", "phase", "total (ms)", "hidden (ms)", "exposed (ms)", "slowdown (ms)",
                      "net saving (ms)"], orows) if orows else ""))


def topology_section(a: Analysis) -> str:
    t = a.topology
    arows = [[x.axis, x.degree, "+".join(x.tiers), x.domains, x.nodes, x.groups_per_node,
              gb(sum(x.bytes_per_step.values()))] for x in t.axes]
    trows = [[x.tier, gb(x.bytes_per_step), x.busiest_link or "-", pct(x.utilisation),
              "yes" if x.saturated else "no", pct(x.busy_fraction)] for x in t.tiers]
    flags = "".join(f'<p class="warn">{esc(f)}</p>' for f in t.flags) or para(
        "No high-frequency traffic on a far tier.", "note")
    return ("<h3>4. Topology fit</h3>"
            + table(["axis", "degree", "tiers", "domains", "nodes", "groups/node", "GB/step per GPU"], arows)
            + table(["tier", "GB/step per GPU", "busiest link", "its utilisation (%)", "saturated", "busy (% of step)"],
                    trows) + flags)


def scaling_section(a: Analysis) -> str:
    charts = []
    series = {"step": [], "eff": [], "energy": []}
    missing = []
    for mode, color, dashed in (("strong", PALETTE[0], False), ("weak", PALETTE[3], True)):
        pts = sorted((s for s in a.scaling if s.mode == mode), key=lambda s: s.num_gpus)
        ok = [s for s in pts if s.step_s is not None]
        missing += [(s.num_gpus, f"{mode}, {s.num_gpus} GPUs: {s.note}") for s in pts if s.step_s is None]
        if not ok:
            continue
        xs = tuple(s.num_gpus for s in ok)
        hollow = tuple(not s.fits for s in ok)
        series["step"].append(Series(mode, xs, tuple(s.step_s for s in ok), color, dashed, hollow))
        series["eff"].append(Series(f"{mode} efficiency", xs, tuple(s.efficiency * 100 for s in ok), color, dashed,
                                    hollow))
        series["eff"].append(Series(f"{mode} exposed comm", xs, tuple(s.communication_share * 100 for s in ok),
                                    PALETTE[2 if mode == "strong" else 4], True, hollow))
        series["energy"].append(Series(mode, xs, tuple(s.energy_per_step_j / 1e3 for s in ok), color, dashed, hollow))
    charts.append(line_chart("Step time (hollow: does not fit; x: no valid plan)", series["step"], "log2", "log10",
                             "GPUs", "step (s)", missing_x=missing))
    charts.append(line_chart("Efficiency and exposed communication", series["eff"], "log2", "linear", "GPUs",
                             "% (efficiency; share of step)"))
    charts.append(line_chart("Energy per step, GPUs (whole job)", series["energy"], "log2", "log10", "GPUs", "kJ"))
    rows = [[s.mode, s.num_gpus, s.dp, s.gbs, s.mbs, "-" if s.step_s is None else f"{s.step_s:.4g}",
             pct(s.efficiency), pct(s.communication_share),
             "-" if s.energy_per_step_j is None else f"{s.energy_per_step_j / 1e3:,.1f}",
             "-" if s.tokens_per_s is None else f"{s.tokens_per_s:,.0f}", f"{s.interruptions_per_day:.3f}",
             "yes" if s.fits else "NO", s.note] for s in a.scaling]
    return ("<h3>5. Scaling</h3>" + para("Strong: fixed global batch; weak: fixed batch per replica. Every size is "
                                         "listed: repaired plans say what was repaired, sizes without a valid plan "
                                         "say why.", "note")
            + figures(*charts)
            + table(["mode", "GPUs", "dp", "gbs", "mbs", "step (s)", "efficiency (%)", "comm (% step)",
                     "energy/step (kJ)", "tokens/s", "interruptions/day", "fits", "note"], rows, text_cols=(12,)))


def accounts_section(a: Analysis) -> str:
    return section("accounts", "Five accounts", ledger_section(a), collectives_section(a), topology_section(a),
                   scaling_section(a))


def memory_section(a: Analysis) -> str:
    mems = a.prediction.memory_by_stage
    keys = list(dict.fromkeys(k for m in mems for k in m.items))
    plan = a.prediction.scenario.plan
    chart = stacked_columns("Memory per GPU by pipeline " + ("rank" if plan.dualpipe else "stage"),
                            [rank_label(plan, m.stage) for m in mems],
                            [(k, [m.items.get(k, 0.0) / 1e9 for m in mems]) for k in keys], "GB",
                            cap=mems[0].capacity_bytes / 1e9,
                            cap_label=f"HBM capacity {mems[0].capacity_bytes / 1e9:.1f} GB",
                            short=[f"{'r' if plan.dualpipe else 's'}{m.stage}" for m in mems])
    m = a.prediction.memory
    rows = [[k, gb(v), pct(v / m.capacity_bytes)] for k, v in m.items.items()]
    rows.append(["total", gb(m.total_bytes), pct(m.total_bytes / m.capacity_bytes)])
    fit = (f"Fits in {m.capacity_bytes / 1e9:.1f} GB." if m.fits else
           f"DOES NOT FIT: {rank_label(plan, m.stage)} needs {m.total_bytes / 1e9:.1f} GB of "
           f"{m.capacity_bytes / 1e9:.1f} GB.")
    return section("memory", "Memory per stage", figures(chart),
                   f"<h3>Most loaded: {rank_label(plan, m.stage)}</h3>", table(["item", "GB", "of HBM (%)"], rows),
                   para(fit, "" if m.fits else "warn"))


def budgets_section(a: Analysis) -> str:
    d = a.distance
    drows = [[i.item, gb(i.bytes_per_rank), i.level, f"{i.accesses_per_step:.3g}", gb(i.bytes_moved_per_step),
              f"{i.working_set_bytes / 1e6:,.1f}", i.nearer_level or "-", i.note] for i in d.items]
    parts = [f"<h3>Distance budget ({critical_title(a.prediction.scenario.plan, d.stage)})</h3>",
             table(["item", "size (GB)", "lives in", "accesses/step", "moved/step (GB)", "working set (MB)",
                    "could live in", "note"], drows, text_cols=(7,))]
    if d.stage_note:
        parts.append(para("Note: " + d.stage_note, "note"))
    if d.persistence is not None:
        c = d.persistence
        pts = c.points
        parts.append(para(f"Persistent RNN: FP16 layer weights fit {c.usable_fraction:.0%} of "
                          f"{c.sram_bytes / 1e6:.1f} MB SRAM up to hidden {c.hidden_limit}; throughput cliff at the "
                          f"limit ×{c.cliff_ratio:.2f}."))
        parts.append(figures(line_chart(
            "Persistent-RNN cliff", [Series("with persistence where it fits", tuple(q.hidden for q in pts),
                                            tuple(q.useful_flop_per_s_per_gpu / 1e12 for q in pts), PALETTE[0]),
                                     Series("weights re-read from HBM (core model)", tuple(q.hidden for q in pts),
                                            tuple(q.useful_flop_per_s_per_gpu * q.step_s / q.core_step_s / 1e12
                                                  for q in pts), PALETTE[3], True)],
            "linear", "linear", "hidden size", "useful TFLOP/s per GPU")))
    c = a.communication
    crows = [[x.tier, gb(x.bytes_per_step), g(x.bytes_per_useful_flop), ms(x.modelled_s), ms(x.exposed_s)]
             for x in c.tiers]
    parts += ["<h3>Communication budget</h3>",
              table(["tier", "GB/step", "bytes/useful FLOP", "modelled (ms)", "exposed (ms)"], crows),
              para((f"Dominant pattern: {c.dominant} ({ms(c.dominant_exposed_s)} ms on the critical path). "
                    if c.dominant and c.dominant_exposed_s > 0 else "No communication is exposed on the critical "
                                                                    "path. ")
                   + f"Gradient compression ×{c.compression_ratio:g} would save {ms(c.compression_saving_s)} ms.")]
    s, f, ck = a.synchronisation, a.synchronisation.failures, a.synchronisation.checkpoint
    parts += ["<h3>Synchronisation budget</h3>", "<ul>",
              f"<li>{s.sync_points_per_step:,.0f} sync points per step; jitter cv {s.jitter_cv:.1%} "
              f"({esc(s.jitter_method)}): waiting for the slowest costs {s.jitter_wait_s * 1e3:,.1f} ms per step.</li>",
              f"<li>One node {s.slow_node_fraction * 100:g} % slower: step {s.slow_node_step_s:.4g} s.</li>",
              f"<li>Pipeline bubble {s.bubble_s * 1e3:,.1f} ms ({pct(s.bubble_fraction)} % of the step).</li>",
              f"<li>Failures: job MTBF {_h(f.mtbf_s)} h ({f.interruptions_per_day:.3f} interruptions/day); checkpoint "
              f"interval {_min(f.daly_interval_s)} min (Daly); waste "
              f"{pct(f.waste_fraction)} %; goodput with jitter {pct(s.goodput)} %{_goodput_wait(s)}.</li></ul>",
              table(["checkpoint", "value"], [
                  ["state (GB)", gb(ck.checkpoint_bytes)], ["writers", ck.writers],
                  ["per writer (GB)", gb(ck.bytes_per_writer)],
                  ["storage write / read (GB/s)", f"{ck.storage_write_bw_bytes_per_s / 1e9:,.1f} / "
                                                  f"{ck.storage_read_bw_bytes_per_s / 1e9:,.1f}"],
                  ["front-end of the writers (GB/s)", f"{ck.front_end_bw_bytes_per_s / 1e9:,.1f}"],
                  ["serialisation (s)", f"{ck.serialise_s:.3g}"], ["write (s)", f"{ck.write_s:.3g}"],
                  ["restore (s)", f"{ck.restore_s:.3g}"], ["bottleneck", ck.bottleneck]])]
    return section("budgets", "Three budgets", *parts)


def _h(t: float) -> str:
    return "inf" if math.isinf(t) else f"{t / 3600:,.2f}"


def _min(t: float) -> str:
    return "inf" if math.isinf(t) else f"{t / 60:,.1f}"


def energy_section(a: Analysis) -> str:
    e = a.energy
    n = a.context.num_gpus
    rows = [[lv.level, f"{lv.total_j / 1e3:,.1f}", f"{lv.per_token_j:.3g}", f"{lv.power_w / n:,.0f}", lv.added,
             lv.source] for lv in e.levels]
    comp = [["arithmetic", f"{e.flop_j / 1e3:,.2f}"]] + [[f"data @ {k}", f"{v / 1e3:,.3f}"] for k, v in
                                                         e.bytes_j.items() if v > 0]
    comp.append(["static (idle power × time)", f"{e.static_j / 1e3:,.2f}"])
    return section("energy", "Energy per step (whole job)",
                   table(["level", "kJ/step", "J/token", "W per GPU", "adds", "source"], rows, text_cols=(4, 5)),
                   "<h3>GPU level by component</h3>", table(["component", "kJ"], comp),
                   para(f"{e.pj_per_flop:.3g} pJ/FLOP effective; GPU TDP {e.tdp_w:.0f} W. Source: {e.source}", "note"))


def timeline_section(a: Analysis) -> str:
    colors = {"fwd": PALETTE[0], "bwd": PALETTE[1], "comm": PALETTE[3], "bubble": PALETTE[7],
              "optimizer": PALETTE[2]}
    ev = [e for e in timeline_events(a) if e.get("ph") == "X"]
    tids = sorted(TRACKS)
    names = {1: "compute", 2: "exposed comm", 3: "overlapped comm", 4: "bubble / step"}
    bars = [(tids.index(e["tid"]), e["ts"] / 1e6, e["dur"] / 1e6, e["name"], colors.get(e.get("cat"), PALETTE[7]))
            for e in ev if e["tid"] in TRACKS]
    step = a.prediction.step_time_s
    plan = a.prediction.scenario.plan
    whose = (f"pipeline {rank_label(plan, a.context.critical_stage)}" if plan.dualpipe
             else f"a rank of {rank_label(plan, a.context.critical_stage)}")
    svgs = [gantt(f"One step on {whose} ({len(ev):,} events)",
                  [names.get(t, TRACKS[t]) for t in tids], bars, step)]
    later = sorted(e["ts"] for e in ev if (e.get("args") or {}).get("microbatch") == 2)
    if later:  # the first two micro-batches, where the individual kernels and transfers can be seen
        end = later[0] / 1e6
        svgs.append(gantt("The first two micro-batches", [names.get(t, TRACKS[t]) for t in tids],
                          [(b[0], b[1], min(b[2], end - b[1]), b[3], b[4]) for b in bars if b[1] < end], end, 1e3,
                          "ms"))
    return section("timeline", "Timeline of one step", figures(*svgs), para(
        "Blue forward, orange backward, red communication, grey bubble, green optimizer; adjacent events of one "
        "kind are drawn as one bar. The full Chrome trace: `narrowpath analyze --timeline FILE` (ui.perfetto.dev).",
        "note"))


JITTER_METHOD = {"closed_form": "closed form's", "sampled": "Monte Carlo sample's"}
"""The jitter wait of each --jitter-method, as the goodput sentence names it."""


def _goodput_wait(s) -> str:
    """Which jitter wait the goodput counts: the simulator's when it played the step (analysis.synchronisation),
    else the budget's own, from the closed form or sampled (s.jitter_method)."""
    method = JITTER_METHOD.get(s.jitter_method, f"{s.jitter_method} method's")
    sim = s.simulated
    if sim is not None and sim.steps:
        return (f" (it counts the simulator's jitter wait, {sim.jitter_wait_s * 1e3:,.1f} ms per step over "
                f"{sim.steps} steps; the {method} is above)")
    return f" (it counts the {method} jitter wait above)"
