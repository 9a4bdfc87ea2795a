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
from itertools import islice, product
from typing import Iterator

from narrowpath.errors import NarrowpathError, SpecError
from narrowpath.spec.plan import SPLIT_DEFAULTS, SPLIT_KNOBS, Plan, interleave_groups_ok
from narrowpath.spec.scenario import Scenario, consistency_errors

MAX_GBS_STEPS = 8
"""Multiples of the divisibility step tried on each side of the global batch."""
MAX_GBS_SCAN = 1024
"""Micro-batch counts looked at on each side of the global batch's for those (a group smaller than pp, or one far
above the batch, splits none of them: no option then)."""


def _vpp_options(p: "_Knobs") -> list[int]:
    """The plan's vpp and each smaller one, down to 1 (the spec then checks each against the layers: pp·vpp may
    exceed them by the chunks the embedding and the output layer take alone — Llama-3 405B's 126 layers on pp 16
    run vpp 8, its first chunk and its last empty)."""
    if p.pp == 1:
        return [1]
    return list(range(max(1, p.vpp), 0, -1))


def _mbs_options(mbs: int) -> list[int]:
    out = [mbs]
    while out[-1] > 1:
        out.append(out[-1] // 2)
    return out


def _gbs_options(gbs: int, dp: int, mbs: int, pp: int, interleaved: bool, group: int = 0,
                 group_fixed: bool = False) -> list[int]:
    """Global batches near `gbs` whose micro-batch count the schedule runs, up to MAX_GBS_STEPS on each side,
    nearest first (ties go up: more micro-batches, a smaller bubble): any count for one chunk per stage; for the
    interleaved schedule a count Megatron-Core splits into micro-batch groups (`spec.plan.interleave_groups_ok`) —
    of the `group` set (there m need not be a multiple of pp), or, unless that group was asked for
    (`group_fixed`), of pp (a multiple of pp: the group follows its schedule, `_group_follows`)."""
    unit = dp * mbs

    def runs(m: int) -> bool:
        if not interleaved:
            return True
        if group > 0 and interleave_groups_ok(pp, m, group):
            return True
        return not (group > 0 and group_fixed) and interleave_groups_ok(pp, m)

    if gbs % unit == 0 and runs(gbs // unit):
        return [gbs]
    m0 = gbs // unit
    up = islice((m * unit for m in range(m0 + 1, m0 + 1 + MAX_GBS_SCAN) if runs(m)), MAX_GBS_STEPS)
    down = islice((m * unit for m in range(-(-gbs // unit) - 1, max(0, m0 - MAX_GBS_SCAN), -1) if runs(m)),
                  MAX_GBS_STEPS)
    return sorted([*up, *down], key=lambda g: (abs(g - gbs), -g))


def _candidates(scn: Scenario, p: "_Knobs", fixed: set[str], allow_gbs: bool) -> Iterator[tuple[int, dict]]:
    """(cost, knob changes) of every repair combination, cheapest first."""
    vpps = [p.vpp] if "vpp" in fixed else _vpp_options(p)
    mbss = [p.mbs] if "mbs" in fixed else _mbs_options(p.mbs)
    combos = []
    for v, mb in product(vpps, mbss):
        gbss = [p.gbs] if "gbs" in fixed or not allow_gbs else _gbs_options(p.gbs, p.dp, mb, p.pp, v > 1,
                                                                             p.vp_group, "vp_group" in fixed)
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
    seed = _Knobs(**{k: kw[k] for k in ("pp", "dp", "mbs", "vpp", "gbs", "vp_group")})
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
    vp_group: int = 0


def _short(reason: str) -> str:
    """The spec's message without its field prefix."""
    return reason.split(": ", 1)[1] if ": " in reason else reason
