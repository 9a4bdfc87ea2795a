"""Repair a knob change to the nearest valid plan: the dependent knobs follow, and every repair is said.

A practitioner who halves TP or doubles the micro-batch expects the rest of the plan to follow: DP absorbs the
freed GPUs, sequence parallelism goes with TP 1, interleaving goes with PP 1, and when the interleaved schedule no
longer divides (micro-batches not a multiple of PP, or PP·vPP beyond the layers) the nearest valid setting is
taken. Preference, cheapest first (a change the optimizer would notice is the last resort):
1. the number of virtual stages (vpp), down towards 1 (the schedule changes, the maths does not);
2. the micro-batch, halved (memory and kernel efficiency change, the maths does not);
3. the global batch, to the nearest multiple that divides — only when asked (`allow_gbs`), since the training
   recipe changes and step times of different batches do not compare; the repair says so.
Knobs the change names explicitly are never touched. The checks are the spec's own (`Plan`, and
`spec.scenario.consistency_errors`), so a repaired plan is exactly one the spec accepts.
"""
from __future__ import annotations

import dataclasses
from itertools import product
from typing import Iterator

from narrowpath.errors import NarrowpathError, SpecError
from narrowpath.spec.plan import SPLIT_DEFAULTS, SPLIT_KNOBS, Plan, interleave_groups_ok
from narrowpath.spec.scenario import Scenario, consistency_errors

MAX_GBS_STEPS = 8
"""Multiples of the divisibility step tried on each side of the global batch."""


def _vpp_options(p: "_Knobs", layers: int) -> list[int]:
    if p.pp == 1:
        return [1]
    top = min(p.vpp, max(1, layers // p.pp))
    return list(range(top, 0, -1))


def _mbs_options(mbs: int) -> list[int]:
    out = [mbs]
    while out[-1] > 1:
        out.append(out[-1] // 2)
    return out


def _gbs_options(gbs: int, dp: int, mbs: int, pp: int, interleaved: bool) -> list[int]:
    step = dp * mbs * (pp if interleaved else 1)
    if gbs % step == 0:
        return [gbs]
    lo, hi = gbs // step * step, (gbs // step + 1) * step
    out = []
    for i in range(MAX_GBS_STEPS):
        for g in (hi + i * step, lo - i * step):  # nearest first; ties go up (more micro-batches, smaller bubble)
            if g > 0 and g not in out:
                out.append(g)
    return sorted(out, key=lambda g: (abs(g - gbs), -g))


def _candidates(scn: Scenario, p: "_Knobs", fixed: set[str], allow_gbs: bool) -> Iterator[tuple[int, dict]]:
    """(cost, knob changes) of every repair combination, cheapest first."""
    vpps = [p.vpp] if "vpp" in fixed else _vpp_options(p, scn.model.layers)
    mbss = [p.mbs] if "mbs" in fixed else _mbs_options(p.mbs)
    combos = []
    for v, mb in product(vpps, mbss):
        gbss = [p.gbs] if "gbs" in fixed or not allow_gbs else _gbs_options(p.gbs, p.dp, mb, p.pp, v > 1)
        for g in gbss:
            cost = (p.vpp - v) + 100 * (mbss.index(mb)) + 10_000 * (g != p.gbs) + abs(g - p.gbs) / max(1, p.gbs)
            combos.append((cost, {"vpp": v, "mbs": mb, "gbs": g}))
    combos.sort(key=lambda c: c[0])
    yield from combos


def _split_follows(kw: dict, old: Plan, fixed: set[str]) -> dict:
    """A layer split (first / last stage or per chunk) belongs to its pipeline: when pp or vpp change, or the chunks
    move between Megatron's placement and DualPipeV's V, and the split was not asked for, the new pipeline splits its
    layers automatically (as the command line's --pp does)."""
    kw = _group_follows(kw, fixed)
    same_v = (kw["pipeline_schedule"] == "dualpipev") == (old.pipeline_schedule == "dualpipev")
    if fixed & set(SPLIT_KNOBS) or ((kw["pp"], kw["vpp"]) == (old.pp, old.vpp) and same_v):
        return kw
    return {**kw, **SPLIT_DEFAULTS}


def _group_follows(kw: dict, fixed: set[str]) -> dict:
    """An interleaved micro-batch group (`vp_group`) belongs to its schedule: when the change leaves no interleaved
    schedule, or one whose micro-batches the group no longer splits as Megatron-Core allows, and the group was not
    asked for, the schedule takes Megatron-Core's default groups (pp)."""
    g = kw.get("vp_group", 0)
    if not g or "vp_group" in fixed:
        return kw
    per = kw["dp"] * kw["mbs"]
    m = kw["gbs"] // per if per > 0 else 0
    if kw["vpp"] == 1 or kw["pipeline_schedule"] != "auto" or not interleave_groups_ok(kw["pp"], m, g):
        return {**kw, "vp_group": 0}
    return kw


def _describe(old: Plan, new: Plan, fixed: set[str], reason: str) -> tuple[str, ...]:
    notes = []
    if any(getattr(old, k) != getattr(new, k) for k in SPLIT_KNOBS) and not fixed & set(SPLIT_KNOBS):
        notes.append("uneven stage split -> automatic")
    for knob in ("dp", "sequence_parallel", "vpp", "vp_group", "mbs", "gbs"):
        a, b = getattr(old, knob), getattr(new, knob)
        if a != b and knob not in fixed:
            label = {"sequence_parallel": "sequence parallel", "gbs": "global batch", "mbs": "micro-batch",
                     "vp_group": "interleaving group (0: pp)"}.get(knob, knob)
            note = f"{label} {a} -> {b}"
            if knob == "gbs":
                note += " (changes the training recipe)"
            notes.append(note)
    if notes and reason:
        notes[-1] += f": {reason}"
    return tuple(notes)


def repaired(scn: Scenario, *, allow_gbs: bool = False, **changes) -> tuple[Scenario, tuple[str, ...]]:
    """The scenario with `changes` applied to its plan and the dependent knobs repaired (module docstring), and
    what was repaired; NarrowpathError (the spec's own message) when no repair makes it valid."""
    p0 = scn.plan
    fixed = set(changes)
    kw = {f.name: getattr(p0, f.name) for f in dataclasses.fields(p0)}
    kw.update(changes)
    gpus = scn.num_gpus
    if "dp" not in fixed:
        per = kw["tp"] * kw["pp"] * kw["cp"]
        if gpus % per:
            raise SpecError("plan", f"{gpus} GPUs are not divisible by tp·pp·cp = {per}")
        kw["dp"] = gpus // per
    else:
        gpus = kw["tp"] * kw["pp"] * kw["cp"] * kw["dp"]
    if kw["tp"] == 1:
        kw["sequence_parallel"] = False
    if kw["pp"] == 1:
        kw["vpp"] = 1
    first: NarrowpathError | None = None
    try:  # the plan as asked (dp, sp and vpp following) may already be valid
        plan = Plan(**_split_follows(kw, p0, fixed))
        errs = consistency_errors(scn.model, plan, gpus, scn.system)
        if not errs:
            return dataclasses.replace(scn, plan=plan, num_gpus=gpus), _describe(p0, plan, fixed, "")
        first = SpecError(*errs[0])
    except NarrowpathError as exc:
        first = exc
    reason = str(first)
    seed = _Knobs(**{k: kw[k] for k in ("pp", "dp", "mbs", "vpp", "gbs")})
    for _, ch in _candidates(scn, seed, fixed, allow_gbs):
        try:
            plan = Plan(**_split_follows({**kw, **ch}, p0, fixed))
        except NarrowpathError:
            continue
        if not consistency_errors(scn.model, plan, gpus, scn.system):
            return dataclasses.replace(scn, plan=plan, num_gpus=gpus), _describe(p0, plan, fixed, _short(reason))
    raise first


@dataclasses.dataclass(frozen=True)
class _Knobs:
    """The knobs `_candidates` enumerates from (the plan as asked may be one the spec refuses)."""

    pp: int
    dp: int
    mbs: int
    vpp: int
    gbs: int


def _short(reason: str) -> str:
    """The spec's message without its field prefix."""
    return reason.split(": ", 1)[1] if ": " in reason else reason
