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

from narrowpath.analysis.context import Context, components
from narrowpath.analysis.remedies import HIGH_FREQUENCY, candidates
from narrowpath.analysis.traffic import pp_bucket_contents
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


def component_label(ctx: Context, key: str) -> str:
    if key.startswith("exposed_"):
        ax = key.split("_")[1]
        span = ctx.spans.get(ax)
        if ax == "pp":  # the bucket also holds the activation offload's host copies (schedule.step.bucket_axes)
            return pp_bucket_label(ctx.pred)
        if span is not None:
            tiers = list(span.tiers)
        else:
            tiers = sorted({t.tier for t in ctx.pred.transfers if t.axis.startswith(ax) and t.exposed_s > 0})
        return f"exposed {AXIS_LABEL.get(ax, ax)} communication over {' + '.join(tiers) or 'the network'}"
    return {"hbm_bound_compute": "memory-bound kernels at the HBM roof", "bubble": "the pipeline bubble",
            "optimizer": "the optimizer update", "matrix_compute": "matrix arithmetic",
            "host_wait": "the GPU waiting for the host (kernels issued one by one, host synchronisations)"
            }.get(key, key)


def pp_bucket_label(pred) -> str:
    """What the breakdown's exposed pipeline bucket holds: the pipeline's sends over their tiers, the activation
    offload's copies over the host link (`host` transfers, plan.offload_layers), or both."""
    tiers, copies = pp_bucket_contents(pred)
    parts = ([f"pipeline communication over {' + '.join(tiers)}"] if tiers else []) + \
        (["activation offload copies over the host link"] if copies else [])
    return "exposed " + (" and ".join(parts) or "pipeline communication over the network")


def tier_carries_traffic(ctx: Context, tier: str) -> bool:
    """True when some transfer of the step is priced on `tier` or has a group spanning it."""
    for t in ctx.pred.transfers:
        span = ctx.spans.get(t.axis)
        if t.tier == tier or (span is not None and t.axis != "pp" and tier in span.tiers):
            return True
    return False


def remedy_sentence(ctx: Context, key: str, what_ifs: tuple[WhatIf, ...]) -> str:
    """What the what-ifs tried for component `key` say (module docstring): the change on the same hardware (plan
    and software) that shrinks that component most, and a hardware or fabric change when one does more. A change
    that makes the step faster while it grows the named path (FP8 matrix multiplies speed the matrix arithmetic
    and add casts to the memory-bound kernels) is not a remedy for it."""
    label = component_label(ctx, key)
    now = components(ctx)[key]
    tried = [w for w in what_ifs if key in w.targets and w.status not in ("invalid", "not applicable")]

    def shrink(w: WhatIf) -> float:  # how much of the named path the change removes (its step gain if not split)
        return now - w.components_s[key] if w.components_s is not None else w.gain_s

    best = [w for w in tried if w.status == "faster" and shrink(w) > 0]
    grows = [w for w in tried if w.status == "faster" and shrink(w) <= 0]
    same = [w for w in best if w.kind in ("plan", "software")]
    other = [w for w in best if w.kind not in ("plan", "software")]

    def said(w: WhatIf) -> str:
        part = (f"{label} {now:.3g} -> {w.components_s[key]:.3g} s, " if w.components_s is not None else "")
        return f"{w.description} ({part}step {w.gain_s:.3g} s faster, {w.gain_fraction:.1%})"
    parts = []
    if same:
        parts.append(f"Best remedy tried for it on this hardware: {said(max(same, key=shrink))}.")
    if other and (not same or max(map(shrink, other)) > max(map(shrink, same))):
        w = max(other, key=shrink)
        parts.append(f"{'With' if same else 'Best remedy tried for it:'} {said(w)}{' does more.' if same else '.'}")
    if not same and not other:
        if tried:
            names = ", ".join(w.description for w in tried[:4])
            unfit = [w for w in tried if w.status == "does not fit" and w.components_s is not None and shrink(w) > 0]
            parts.append(f"The remedies tried for {label} that shrink it do not fit in memory "
                         f"({', '.join(w.description for w in unfit[:4])})." if unfit
                         else f"The remedies tried for {label} do not shrink it here ({names}).")
        else:
            parts.append(f"No change among the knobs narrowpath models targets {label}.")
    if grows:
        w = max(grows, key=lambda w: w.gain_s)
        grown = (f" {now:.3g} -> {w.components_s[key]:.3g} s" if w.components_s is not None else "")
        parts.append(f"{w.description[0].upper()}{w.description[1:]}: step {w.gain_s:.3g} s faster, but "
                     f"it lengthens {label}{grown}; a remedy elsewhere, not for it.")
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
    if not mem.fits and run_what_ifs:  # a base that cannot run: which changes make it fit is the first thing to say
        fit = [w for w in ranked if w.scenario is not None and w.status not in ("does not fit", "invalid",
                                                                                  "not applicable")]
        sentence += (" Of the changes tried, " + ", ".join(w.description for w in fit[:3])
                     + (" makes" if len(fit[:3]) == 1 else " make") + " the plan fit (gains are against a plan that "
                     "cannot run)." if fit else
                     " None of the changes tried makes the plan fit.")
    return Verdict(key, comps[key], comps[key] / step, sentence, comps, tuple(ranked), remedy)
