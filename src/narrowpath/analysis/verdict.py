"""The verdict: the narrowest path in one sentence, then a ranked list of changes, each re-run through the model.

Narrowest path: the largest component of the step other than matrix arithmetic itself — exposed communication
per axis (named with the tier it crosses), the pipeline bubble, memory-bound compute (the HBM roof, from the
roofline bound of each op), the GPU waiting for the host, or the optimizer — that is what a change can widen; the sentence also gives the
share of matrix arithmetic itself (the useful work, which only a faster chip or fewer FLOPs shrink).

The changes tried (analysis.remedies) are re-predicted (analysis.whatif) and ranked by gain; only those that make
the step faster by more than the model's resolution are ranked, "no gain", slower, unfit and invalid ones follow.
The narrowest path always gets an answer: the sentence names the best remedy tried for it, says that the remedies
tried for it gain nothing, or says that no change among the modelled knobs targets it.
"""
from __future__ import annotations

from dataclasses import dataclass

from narrowpath.analysis.context import Context
from narrowpath.analysis.remedies import HIGH_FREQUENCY, candidates
from narrowpath.analysis.whatif import STATUSES, WhatIf

__all__ = ["HIGH_FREQUENCY", "Verdict", "build_verdict", "components", "tier_carries_traffic"]
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
    remedy: str
    """What the what-ifs say about the narrowest path (module docstring); '' when what-ifs were not run."""


def components(ctx: Context) -> dict[str, float]:
    """The step split into paths: breakdown entries, with compute split into the time the GPU waits for the host
    (the critical rank's host waits: kernels issued slower than they run, host synchronisations; schedule.step) and
    the rest by the roof that limits each op."""
    b = dict(ctx.pred.breakdown_s)
    compute = b.pop("compute")
    host = ctx.pred.host_wait_s
    gpu = compute - host
    mem = sum(r.total_s for r in ctx.ops if r.bound == "memory" and r.op.phase != "optimizer")
    mat = sum(r.total_s for r in ctx.ops if r.bound == "compute" and r.op.phase != "optimizer")
    mem_part = gpu * mem / (mem + mat) if mem + mat else 0.0
    return {"matrix_compute": gpu - mem_part, "hbm_bound_compute": mem_part, "host_wait": host, **b}


def component_label(ctx: Context, key: str) -> str:
    if key.startswith("exposed_"):
        ax = key.split("_")[1]
        span = ctx.spans.get(ax)
        if span is not None and ax != "pp":
            tiers = list(span.tiers)
        else:
            tiers = sorted({t.tier for t in ctx.pred.transfers if t.axis.startswith(ax) and t.exposed_s > 0})
        return f"exposed {AXIS_LABEL.get(ax, ax)} communication over {' + '.join(tiers) or 'the network'}"
    return {"hbm_bound_compute": "memory-bound kernels at the HBM roof", "bubble": "the pipeline bubble",
            "optimizer": "the optimizer update", "matrix_compute": "matrix arithmetic",
            "host_wait": "the GPU waiting for the host (kernels issued one by one, host synchronisations)"
            }.get(key, key)


def tier_carries_traffic(ctx: Context, tier: str) -> bool:
    """True when some transfer of the step is priced on `tier` or has a group spanning it."""
    for t in ctx.pred.transfers:
        span = ctx.spans.get(t.axis)
        if t.tier == tier or (span is not None and t.axis != "pp" and tier in span.tiers):
            return True
    return False


def remedy_sentence(ctx: Context, key: str, what_ifs: tuple[WhatIf, ...]) -> str:
    """What the what-ifs tried for component `key` say (module docstring): the best change on the same hardware
    (plan and software), and a hardware or fabric change when one does better."""
    label = component_label(ctx, key)
    tried = [w for w in what_ifs if key in w.targets and w.status not in ("invalid", "not applicable")]
    best = [w for w in tried if w.status == "faster"]
    same = [w for w in best if w.kind in ("plan", "software")]
    other = [w for w in best if w.kind not in ("plan", "software")]
    parts = []
    if same:
        w = max(same, key=lambda w: w.gain_s)
        parts.append(f"Best remedy tried for it on this hardware: {w.description} ({w.gain_s:.3g} s faster, "
                     f"{w.gain_fraction:.1%} of the step).")
    if other and (not same or max(o.gain_s for o in other) > max(w.gain_s for w in same)):
        w = max(other, key=lambda w: w.gain_s)
        parts.append(f"{'With' if same else 'Best remedy tried for it:'} {w.description} "
                     f"({w.gain_s:.3g} s faster, {w.gain_fraction:.1%}){' does more.' if same else '.'}")
    if not same and not other:
        if tried:
            names = ", ".join(w.description for w in tried[:4])
            parts.append(f"The remedies tried for {label} gain nothing here ({names}).")
        else:
            parts.append(f"No change among the knobs narrowpath models targets {label}.")
    return " ".join(parts)


def build_verdict(ctx: Context, run_what_ifs: bool = True, sram_usable_fraction: float = 0.75) -> Verdict:
    pred = ctx.pred
    comps = components(ctx)
    step = pred.step_time_s
    others = {k: v for k, v in comps.items() if k != "matrix_compute" and v > 0}
    mat = comps["matrix_compute"]
    if others:
        key = max(others, key=others.get)
        sentence = (f"The narrowest path is {component_label(ctx, key)}: {others[key]:.3g} s of {step:.3g} s "
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
    for c in candidates(ctx, sram_usable_fraction) if run_what_ifs else []:
        w = c.run(ctx)
        same = [o for o in wis if o.scenario is not None and w.scenario is not None
                and (o.scenario.plan, o.scenario.system) == (w.scenario.plan, w.scenario.system)]
        if not same:  # two descriptions of one changed plan are evaluated and listed once
            wis.append(w)
    ranked = sorted([w for w in wis if w.status == "faster"], key=lambda w: -w.gain_s)
    ranked += sorted([w for w in wis if w.status != "faster"], key=lambda w: (STATUSES.index(w.status), -w.gain_s))
    remedy = remedy_sentence(ctx, key, tuple(ranked)) if run_what_ifs else ""
    if remedy:
        sentence += " " + remedy
    return Verdict(key, comps[key], comps[key] / step, sentence, comps, tuple(ranked), remedy)
