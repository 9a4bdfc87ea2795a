"""Search serving plans: every consistent layout (tp, pp, attention dp, ep, replicas, a disaggregated split) and
batch limit for a model on a fixed number of GPUs, each served at its steady state, ranked by output tokens/s
per GPU among the plans that meet the latency SLOs.

Disaggregated plans come two ways: prefill instances of the decode instances' layout (a quarter or half of the
replicas), and — as DistServe places them (Zhong et al., OSDI 2024, §4.1) — prefill instances of a layout of their
own: each layout's prefill capacity per GPU (prompts at its stack's token budget) and decode capacity per GPU (at
each batch limit) are read off the first pass (a prefill layout at its stack's token budget, or the largest halving
whose iteration fits the TTFT SLO), the best `prefill_layouts` prefill layouts whose one full prompt iteration fits
the TTFT SLO are paired with the best `decode_layouts` decode layouts whose full-batch step fits the
TPOT SLO, and each pair's instance counts are matched to the two phases' rates on the GPUs given
(schedule.serving_steady.matched_split); the pairs are then served at their steady state like every other plan.

A plan is evaluated by schedule.serving_steady.steady_lane: a closed loop keeps each lane's batch (the plan's
max_batch) full with requests of the load's lengths; TTFT and TPOT are read at a percentile (default p90) over the
requests after a warm-up batch, and throughput is the saturated rate. This is the batch-size sweep serving
configurators run per parallel layout (throughput per GPU against per-request speed), with the SLO as the filter.
Layouts are priced once (their iteration cost model) and reused for every batch limit.
"""
from __future__ import annotations

import dataclasses
import math
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field

from narrowpath.errors import NarrowpathError
from narrowpath.spec.calibration import Calibration
from narrowpath.spec.model import Model
from narrowpath.spec.serving import PREFILL_KNOBS, Load, ServingPlan, ServingScenario, serving_consistency
from narrowpath.spec.system import System

BATCHES = (1, 4, 16, 32, 64, 128, 256, 512)
"""Per-lane batch limits tried for each layout."""
SERVE_KNOBS = ("tp", "pp", "dp", "ep", "replicas", "prefill_replicas", "max_batch")
STATS = ("mean", "p50", "p90", "p99")


@dataclass(frozen=True, slots=True)
class ServeSpace:
    model: Model
    system: System
    num_gpus: int
    load: Load
    base: ServingPlan
    """Formats, framework and other knobs every plan keeps."""
    pins: dict = field(default_factory=dict)
    batches: tuple[int, ...] = BATCHES
    disaggregation: bool = True
    prefill_layouts: int = 2
    """Prefill layouts of their own paired with decode layouts (0: prefill instances only of the decode layout)."""
    decode_layouts: int = 3
    """Decode layouts each such prefill layout is paired with."""


@dataclass(frozen=True, slots=True)
class ServeCandidate:
    plan: ServingPlan
    output_tokens_per_s_per_gpu: float = 0.0
    ttft_s: float = 0.0
    tpot_s: float = 0.0
    meets_slo: bool = False
    failure: str = ""


@dataclass(frozen=True, slots=True)
class PhaseCapacity:
    """What one instance of a layout does in each phase alone, read in the first pass (colocated plans)."""

    layout: ServingPlan
    """The colocated plan of the layout (its tp, dp, ep, pp)."""
    prefill_per_s: float
    """Prompts per second at its stack's token budget (schedule.serving_steady.prefill_rate_per_s)."""
    prefill_iteration_s: float
    """One full token budget's iteration: no prompt's first token comes sooner at that rate."""
    prefill_tokens: int
    """The token budget priced: the stack's for a prefill-only instance, or the largest of its halvings (not below
    one prompt) whose iteration fits the TTFT SLO when the stack's does not."""
    decode: dict
    """Batch limit -> (requests per second decoded with the batch as full as the lane's KV cache lets it be, one
    such step in seconds)."""

    @property
    def gpus(self) -> int:
        return self.layout.instance_gpus


@dataclass(frozen=True, slots=True)
class ServeSearchResult:
    ranked: tuple[ServeCandidate, ...]
    """Plans that meet the SLOs, best first."""
    missed: tuple[ServeCandidate, ...]
    """Plans that run but miss an SLO, by throughput per GPU."""
    num_plans: int
    failed: int
    first_failure: str
    elapsed_s: float
    stat: str


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def redundant_for(model: Model, base: ServingPlan, ep: int) -> int:
    """The base plan's redundant expert copies where they spread over `ep` ranks (ep > 1 dividing experts +
    copies), else none: a search from an EP 72 deployment (256 + 32 slots) still tries EP 64 without copies."""
    if model.moe is None or ep <= 1 or base.expert_slots(model.moe.num_experts) % ep:
        return 0
    return base.redundant_experts


def serve_layouts(space: ServeSpace) -> list[ServingPlan]:
    """Consistent layouts (without the batch limit) of the space, honouring its pins. The space lays out its own
    pools — prefill instances of the decode layout here, of a layout of their own in the pairs (pool_pairs) —, so a
    base plan's prefill_* knobs (a serving file's prefill pool) are not kept: kept, they would give every colocated
    plan a prefill layout without prefill instances (refused) and every split the file's pool whatever its layout."""
    m, sysm, n = space.model, space.system, space.num_gpus
    pins = space.pins
    base = dataclasses.replace(space.base, **dict.fromkeys(PREFILL_KNOBS, 0))
    out = []
    for tp in _divisors(n):
        if tp > sysm.scale_up_domain:
            continue
        for dp in (_divisors(n // tp) if m.moe is not None else [1]):
            for pp in _divisors(n // (tp * dp)):
                if pp > m.layers:
                    continue
                reps = n // (tp * dp * pp)
                eps = [e for e in _divisors(tp * dp)] if m.moe is not None else [1]
                splits = [0] + sorted({max(1, reps // 4), reps // 2} - {0}) if space.disaggregation and reps >= 2 \
                    else [0]
                for ep in eps:
                    red = redundant_for(m, space.base, ep)
                    for pre in splits:
                        plan = dataclasses.replace(base, tp=tp, dp=dp, pp=pp, ep=ep, replicas=reps,
                                                   prefill_replicas=pre, max_batch=0, redundant_experts=red)
                        if any(getattr(plan, k) != v for k, v in pins.items() if k != "max_batch"):
                            continue
                        if not serving_consistency(m, plan, n, sysm):
                            out.append(plan)
    return out


def count_plans(space: ServeSpace) -> int:
    """Plans of the first pass (every layout and batch limit); the search adds the pairs of prefill and decode
    layouts that pass reads off it (pool_pairs)."""
    batches = [space.pins["max_batch"]] if "max_batch" in space.pins else space.batches
    return len(serve_layouts(space)) * len(batches)


def _serve(space: ServeSpace, plan: ServingPlan, cost, cal, slo_ttft: float, slo_tpot: float, stat: str
           ) -> ServeCandidate:
    """One plan at its steady state (schedule.serving_steady.steady_lane), or why it failed."""
    from narrowpath.schedule.serving_steady import steady_lane
    scn = ServingScenario(name="search", system=space.system, model=space.model, plan=plan, load=space.load,
                          num_gpus=space.num_gpus, calibration=cal)
    try:
        s = steady_lane(scn, cost, cal)
        ttft, tpot = s.ttft_s[stat], s.tpot_s[stat]
        if not (ttft > 0 and tpot > 0):
            raise NarrowpathError(f"{plan}: no request measured after the warm-up")
        return ServeCandidate(plan, s.output_tokens_per_s / space.num_gpus, ttft, tpot,
                              ttft <= slo_ttft and tpot <= slo_tpot)
    except NarrowpathError as exc:
        return ServeCandidate(plan, failure=str(exc))


def _resolved(space: ServeSpace, plan: ServingPlan, cal):
    """(scenario, limits) of `plan` under the space's model, system and load, its formats and limits resolved."""
    from narrowpath.schedule.serving_defaults import resolve_formats, resolve_limits
    scn = ServingScenario(name="search", system=space.system, model=space.model, plan=plan, load=space.load,
                          num_gpus=plan.num_gpus, calibration=cal)
    return resolve_limits(resolve_formats(scn, ()))


def _layout_cost(space: ServeSpace, layout: ServingPlan, batch: int, cal):
    """(iteration cost model, limits) of a layout at batch limit `batch` (the largest of the search: one cost model
    prices every smaller limit, ServingCost.for_limits)."""
    from narrowpath.schedule.serving_cost import ServingCost
    r_scn, lim = _resolved(space, dataclasses.replace(layout, max_batch=batch), cal)
    return ServingCost(r_scn, max(lim.max_num_tokens, lim.max_batch * (1 + layout.spec_tokens)), cal), lim


def prefill_budgets(default: int, isl: int) -> list[int]:
    """Token budgets a prefill-only instance is screened at: its stack's, then halvings while they still hold one
    whole prompt (a prompt longer than the stack's budget keeps that budget alone, chunked)."""
    out, b = [default], default // 2
    while b >= isl:
        out.append(b)
        b //= 2
    return out


def _capacity(space: ServeSpace, layout: ServingPlan, cost, batches: tuple[int, ...], cal,
              slo_ttft: float = float("inf")) -> PhaseCapacity:
    """Each phase alone on one instance of `layout` (PhaseCapacity): prefill at the token budget its stack sets for
    a prefill-only instance (no limits given, as ServingPlan.prefill_pool leaves them) or, when that budget's
    iteration misses the TTFT SLO, the largest halving that meets it (prefill_budgets; a prompt longer than the
    budget takes ceil(isl / budget) iterations to its first token); decode at each batch limit with the batch as
    full as the lane's KV cache lets it be (serving_steady.decode_capacity, at that limit's resolved limits)."""
    from narrowpath.schedule.serving_cost import ServingCost
    from narrowpath.schedule.serving_steady import decode_capacity, mean_lengths, prefill_rate_per_s
    isl, osl = mean_lengths(space.load)
    lanes = layout.dp * layout.pp
    pscn, plim = _resolved(space, dataclasses.replace(layout, replicas=1, max_batch=0, max_num_tokens=0), cal)
    need = max(plim.max_num_tokens, plim.max_batch * (1 + layout.spec_tokens))
    pre_cost = cost if need <= cost.grid[-1] else ServingCost(pscn, need, cal)

    def priced(budget: int) -> tuple[int, float, float]:  # (budget, prompts/s, time to a prompt's first token)
        pre = prefill_rate_per_s(pre_cost, lanes, budget, isl)
        return budget, pre, lanes * budget / isl / pre * math.ceil(isl / budget)

    options = [priced(b) for b in prefill_budgets(plim.max_num_tokens, isl)]
    # the largest that meets the SLO; none does: the stack's own budget, which the screen then leaves out
    budget, pre, first_s = next((o for o in options if o[2] <= slo_ttft), options[0])
    decode = {}
    for B in batches:
        r_scn, lim = _resolved(space, dataclasses.replace(layout, max_batch=B), cal)
        rate, b = decode_capacity(cost.for_limits(lim.max_batch, lim.max_num_tokens), lim, lanes, layout.pp, isl, osl,
                                  r_scn.plan.admission, r_scn.plan)
        decode[B] = (rate, lanes * b / osl / rate)
    return PhaseCapacity(layout, pre, first_s, budget if budget != plim.max_num_tokens else 0, decode)


def _evaluate(args) -> tuple[list[ServeCandidate], PhaseCapacity | None]:
    """All batch limits of one layout (runs in a worker process), and, for a colocated layout when prefill pools of
    their own are searched, what one of its instances does in each phase alone."""
    space, layout, batches, slo_ttft, slo_tpot, stat, cal = args
    out = []
    try:
        cost, _ = _layout_cost(space, layout, max(batches), cal)
    except NarrowpathError as exc:
        return [ServeCandidate(dataclasses.replace(layout, max_batch=B), failure=str(exc)) for B in batches], None
    for B in batches:
        out.append(_serve(space, dataclasses.replace(layout, max_batch=B), cost, cal, slo_ttft, slo_tpot, stat))
    cap = None
    if space.disaggregation and space.prefill_layouts and not layout.prefill_replicas and \
            space.load.arrival not in ("trace", "fixed-batch") and cost.scn.plan.policy != "static":
        try:  # a layout that cannot run alone as one instance (e.g. too little memory) pairs with nothing
            cap = _capacity(space, layout, cost, batches, cal, slo_ttft)
        except NarrowpathError:
            cap = None
    return out, cap


def pool_pairs(space: ServeSpace, caps: list[PhaseCapacity], slo_ttft: float, slo_tpot: float
               ) -> list[tuple[PhaseCapacity, PhaseCapacity, tuple[int, ...]]]:
    """(decode layout, prefill layout, batch limits) to serve as disaggregated deployments with prefill instances of
    their own layout: the `prefill_layouts` layouts of most prompts per GPU whose full prompt iteration fits the
    TTFT SLO, each with the `decode_layouts` layouts of most decoded requests per GPU at a batch whose full step
    fits the TPOT SLO (those batches), a different layout than the prefill's, leaving room for both on the GPUs."""
    n = space.num_gpus
    pre = sorted((c for c in caps if c.prefill_iteration_s <= slo_ttft and c.gpus < n),
                 key=lambda c: (-c.prefill_per_s / c.gpus, c.gpus))[:space.prefill_layouts]
    dec = []
    for c in caps:
        ok = tuple(B for B, (rate, step) in c.decode.items() if step <= slo_tpot)
        if ok and c.gpus < n:
            dec.append((max(c.decode[B][0] for B in ok) / c.gpus, c, ok))
    dec.sort(key=lambda d: (-d[0], d[1].gpus))
    out = []
    for p in pre:
        picked = [(c, ok) for _, c, ok in dec if _key(c.layout) != _key(p.layout) and c.gpus + p.gpus <= n
                  and c.layout.redundant_experts == p.layout.redundant_experts]  # both pools keep the copies
        out += [(c, p, ok) for c, ok in picked[:space.decode_layouts]]
    return out


def _key(plan: ServingPlan) -> tuple[int, int, int, int]:
    return plan.tp, plan.dp, plan.ep, plan.pp


def _evaluate_pair(args) -> list[ServeCandidate]:
    """A decode layout's batch limits with prefill instances of another layout (runs in a worker process): per batch
    limit the instance counts that match the two phases' rates (matched_split), served at their steady state."""
    from narrowpath.schedule.serving_steady import matched_split
    space, dec, pre, batches, slo_ttft, slo_tpot, stat, cal = args
    out = []
    try:
        cost, _ = _layout_cost(space, dec.layout, max(batches), cal)
    except NarrowpathError as exc:
        return [ServeCandidate(dataclasses.replace(dec.layout, max_batch=B), failure=str(exc)) for B in batches]
    for B in batches:
        split = matched_split(space.num_gpus, dec.gpus, pre.gpus, dec.decode[B][0], pre.prefill_per_s)
        if split is None:
            continue
        n_dec, n_pre = split
        p = pre.layout
        plan = dataclasses.replace(dec.layout, replicas=n_dec + n_pre, prefill_replicas=n_pre, prefill_tp=p.tp,
                                   prefill_dp=p.dp, prefill_ep=p.ep, prefill_pp=p.pp, max_batch=B,
                                   prefill_max_num_tokens=pre.prefill_tokens)
        if any(getattr(plan, k) != v for k, v in space.pins.items() if k != "max_batch"):
            continue  # a pinned instance count (the pinned layout knobs hold for both layouts already)
        errs = serving_consistency(space.model, plan, space.num_gpus, space.system)
        out.append(ServeCandidate(plan, failure="; ".join(f"{f}: {m}" for f, m in errs)) if errs else
                   _serve(space, plan, cost, cal, slo_ttft, slo_tpot, stat))
    return out


def _run(fn, work: list, jobs: int) -> list:
    """fn over the work items, in `jobs` worker processes when more than one."""
    if jobs > 1 and len(work) > 1:
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            return list(pool.map(fn, work, chunksize=max(1, len(work) // (4 * jobs))))
    return [fn(w) for w in work]


def search_serve(space: ServeSpace, slo_ttft_s: float, slo_tpot_s: float, *, stat: str = "p90", jobs: int = 1,
                 max_plans: int = 200_000, calibration: Calibration | None = None) -> ServeSearchResult:
    """Evaluate every plan of the space (module docstring) and rank those meeting the SLOs."""
    t0 = time.perf_counter()
    layouts = serve_layouts(space)
    batches = (space.pins["max_batch"],) if "max_batch" in space.pins else tuple(space.batches)
    total = len(layouts) * len(batches)
    if total > max_plans:
        raise NarrowpathError(f"search: the space holds {total:,} serving plans, more than --max-plans {max_plans:,}"
                              " (pin a knob such as --tp, or raise the limit)")
    work = [(space, lay, batches, slo_ttft_s, slo_tpot_s, stat, calibration) for lay in layouts]
    first = _run(_evaluate, work, jobs)
    parts = [cands for cands, _ in first]
    caps = [cap for _, cap in first if cap is not None]
    pairs = pool_pairs(space, caps, slo_ttft_s, slo_tpot_s) if caps else []
    if pairs:
        second = _run(_evaluate_pair, [(space, d, p, ok, slo_ttft_s, slo_tpot_s, stat, calibration)
                                       for d, p, ok in pairs], jobs)
        parts += second
        total += sum(len(part) for part in second)
    cands = [c for part in parts for c in part]
    failed = [c for c in cands if c.failure]
    ok = [c for c in cands if not c.failure]
    key = (lambda c: (-c.output_tokens_per_s_per_gpu, c.tpot_s, c.plan.tp, c.plan.pp, c.plan.dp, c.plan.ep,
                      c.plan.prefill_replicas, c.plan.max_batch, c.plan.prefill_tp, c.plan.prefill_dp,
                      c.plan.prefill_ep, c.plan.prefill_pp))
    ranked = sorted((c for c in ok if c.meets_slo), key=key)
    missed = sorted((c for c in ok if not c.meets_slo), key=key)
    return ServeSearchResult(tuple(ranked), tuple(missed), total, len(failed), failed[0].failure if failed else "",
                             time.perf_counter() - t0, stat)
