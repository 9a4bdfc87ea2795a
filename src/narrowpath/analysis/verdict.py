"""The verdict: the narrowest path in one sentence, then a ranked list of changes, each re-run through the model.

Narrowest path: the largest component of the step other than matrix arithmetic itself — exposed communication
per axis (named with the tier it crosses), the pipeline bubble, memory-bound compute (the HBM roof, from the
roofline bound of each op), or the optimizer — that is what a change can widen; the sentence also gives the
share of matrix arithmetic itself (the useful work, which only a faster chip or fewer FLOPs shrink).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from narrowpath.analysis.context import Context
from narrowpath.analysis.whatif import WhatIf, evaluate, with_plan, with_tier

HIGH_FREQUENCY = ("tp", "cp", "ep")
"""Axes whose collectives run per layer and micro-batch: they belong inside the scale-up domain."""
AXIS_LABEL = {"tp": "tensor-parallel", "cp": "context-parallel", "ep": "expert-parallel", "edp": "expert-data-parallel", "pp": "pipeline",
              "dp": "data-parallel"}


@dataclass(frozen=True, slots=True)
class Verdict:
    narrowest: str
    """Component id of the narrowest path."""
    narrowest_s: float
    share: float
    sentence: str
    components_s: dict[str, float]
    what_ifs: tuple[WhatIf, ...]
    """Feasible ones ranked by gain first, then the skipped ones."""


def components(ctx: Context) -> dict[str, float]:
    """The step split into paths: breakdown entries, with compute split by the roof that limits each op."""
    b = dict(ctx.pred.breakdown_s)
    compute = b.pop("compute")
    mem = sum(r.total_s for r in ctx.ops if r.bound == "memory" and r.op.phase != "optimizer")
    mat = sum(r.total_s for r in ctx.ops if r.bound == "compute" and r.op.phase != "optimizer")
    mem_part = compute * mem / (mem + mat) if mem + mat else 0.0
    return {"matrix_compute": compute - mem_part, "hbm_bound_compute": mem_part, **b}


def _label(ctx: Context, key: str) -> str:
    if key.startswith("exposed_"):
        ax = key.split("_")[1]
        span = ctx.spans.get(ax)
        if span is not None and ax != "pp":
            tiers = list(span.tiers)
        else:
            tiers = sorted({t.tier for t in ctx.pred.transfers if t.axis.startswith(ax) and t.exposed_s > 0})
        return f"exposed {AXIS_LABEL.get(ax, ax)} communication over {' + '.join(tiers) or 'the network'}"
    return {"hbm_bound_compute": "memory-bound kernels at the HBM roof", "bubble": "the pipeline bubble",
            "optimizer": "the optimizer update", "matrix_compute": "matrix arithmetic"}.get(key, key)


def tier_carries_traffic(ctx: Context, tier: str) -> bool:
    """True when some transfer of the step is priced on `tier` or has a group spanning it."""
    for t in ctx.pred.transfers:
        span = ctx.spans.get(t.axis)
        if t.tier == tier or (span is not None and t.axis != "pp" and tier in span.tiers):
            return True
    return False


def candidates(ctx: Context) -> list[tuple[str, str, object]]:
    """(change id, description, scenario factory) of every change worth a re-run for this plan."""
    scn = ctx.pred.scenario
    p, system = scn.plan, scn.system
    out: list[tuple[str, str, object]] = []
    dom = system.scale_up_domain
    for ax in HIGH_FREQUENCY:
        span = ctx.spans.get(ax)
        if span is None or not span.crosses_scale_out:
            continue
        if getattr(p, ax) <= dom:
            order = (ax,) + tuple(a for a in p.placement if a != ax)
            out.append((f"{ax}_in_scale_up", f"place {ax.upper()} groups inside the scale-up domain",
                        lambda o=order: with_plan(scn, placement=o)))
        elif ax == "tp":
            out.append(("tp_in_scale_up", f"shrink TP to the scale-up domain ({dom}), raise DP",
                        lambda: with_plan(scn, tp=dom, dp=p.dp * p.tp // dom)))
    if p.gbs % (p.dp * p.mbs * 2) == 0:
        out.append(("raise_mbs", f"raise the micro-batch to {2 * p.mbs}", lambda: with_plan(scn, mbs=2 * p.mbs)))
    if p.pp > 1:
        out.append(("interleave_pipeline", f"interleave the pipeline: vpp {p.vpp} -> {2 * p.vpp}",
                    lambda: with_plan(scn, vpp=2 * p.vpp)))
    if p.dp > 1 and not p.dp_overlap:
        out.append(("dp_overlap", "overlap the gradient sync with backward", lambda: with_plan(scn, dp_overlap=True)))
    if p.tp > 1 and not p.tp_comm_overlap:
        out.append(("tp_comm_overlap", "overlap TP communication with the GEMMs",
                    lambda: with_plan(scn, tp_comm_overlap=True)))
    if p.tp > 1 and not p.sequence_parallel:
        out.append(("sequence_parallel", "enable sequence parallelism", lambda: with_plan(scn, sequence_parallel=True)))
    for tier in ("scale_up", "scale_out"):
        if not system.tier(tier).in_network_reduction and tier_carries_traffic(ctx, tier):
            out.append((f"in_network_reduction_{tier}", f"in-network reduction (SHARP) on {tier}",
                        lambda t=tier: dataclasses.replace(scn, system=with_tier(system, t, in_network_reduction=True))))
    for rc in ("none", "selective", "full"):
        if rc != p.recompute:
            out.append((f"recompute_{rc}", f"recompute {p.recompute} -> {rc}", lambda r=rc: with_plan(scn, recompute=r)))
    if p.dp > 1 and p.zero_stage == 0:
        out.append(("zero1", "shard the optimizer state over DP (ZeRO-1)", lambda: with_plan(scn, zero_stage=1)))
    if p.tp >= 2:
        out.append(("halve_tp", f"TP {p.tp} -> {p.tp // 2}, DP {p.dp} -> {2 * p.dp}",
                    lambda: with_plan(scn, tp=p.tp // 2, dp=2 * p.dp, sequence_parallel=p.sequence_parallel and p.tp > 2)))
    if p.pp >= 2:
        vpp = p.vpp if p.pp // 2 > 1 else 1
        out.append(("halve_pp", f"PP {p.pp} -> {p.pp // 2}, DP {p.dp} -> {2 * p.dp}",
                    lambda: with_plan(scn, pp=p.pp // 2, dp=2 * p.dp, vpp=vpp)))
    return out


def build_verdict(ctx: Context, run_what_ifs: bool = True) -> Verdict:
    pred = ctx.pred
    comps = components(ctx)
    step = pred.step_time_s
    others = {k: v for k, v in comps.items() if k != "matrix_compute" and v > 0}
    mat = comps["matrix_compute"]
    if others:
        key = max(others, key=others.get)
        sentence = (f"The narrowest path is {_label(ctx, key)}: {others[key]:.3g} s of {step:.3g} s "
                    f"({others[key] / step:.0%} of the step); matrix arithmetic itself takes {mat:.3g} s "
                    f"({mat / step:.0%}).")
    else:
        key = "matrix_compute"
        sentence = f"Nothing but matrix arithmetic on the critical path: {mat:.3g} s of {step:.3g} s."
    mem = pred.memory
    if not mem.fits:
        sentence += (f" The plan itself does not fit: stage {mem.stage} needs {mem.total_bytes / 1e9:.1f} GB of "
                     f"{mem.capacity_bytes / 1e9:.1f} GB per GPU.")
    wis: list[WhatIf] = []
    for c, d, f in candidates(ctx) if run_what_ifs else []:
        w = evaluate(pred, c, d, f)
        same = [o for o in wis if o.scenario is not None and w.scenario is not None
                and (o.scenario.plan, o.scenario.system) == (w.scenario.plan, w.scenario.system)]
        if not same:  # two descriptions of one changed plan are evaluated and listed once
            wis.append(w)
    ranked = sorted([w for w in wis if not w.skipped], key=lambda w: -w.gain_s)
    ranked += [w for w in wis if w.skipped]
    return Verdict(key, comps[key], comps[key] / step, sentence, comps, tuple(ranked))
