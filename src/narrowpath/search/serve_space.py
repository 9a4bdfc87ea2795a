"""Search serving plans: every consistent layout (tp, pp, attention dp, ep, replicas, a disaggregated split) and
batch limit for a model on a fixed number of GPUs, each served at its steady state, ranked by output tokens/s
per GPU among the plans that meet the latency SLOs.

A plan is evaluated by schedule.serving_steady.steady_lane: a closed loop keeps each lane's batch (the plan's
max_batch) full with requests of the load's lengths; TTFT and TPOT are read at a percentile (default p90) over the
requests after a warm-up batch, and throughput is the saturated rate. This is the batch-size sweep serving
configurators run per parallel layout (throughput per GPU against per-request speed), with the SLO as the filter.
Layouts are priced once (their iteration cost model) and reused for every batch limit.
"""
from __future__ import annotations

import dataclasses
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field

from narrowpath.errors import NarrowpathError
from narrowpath.spec.calibration import Calibration
from narrowpath.spec.model import Model
from narrowpath.spec.serving import Load, ServingPlan, ServingScenario, serving_consistency
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


@dataclass(frozen=True, slots=True)
class ServeCandidate:
    plan: ServingPlan
    output_tokens_per_s_per_gpu: float = 0.0
    ttft_s: float = 0.0
    tpot_s: float = 0.0
    meets_slo: bool = False
    failure: str = ""


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
    """Consistent layouts (without the batch limit) of the space, honouring its pins."""
    m, sysm, n = space.model, space.system, space.num_gpus
    pins = space.pins
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
                        plan = dataclasses.replace(space.base, tp=tp, dp=dp, pp=pp, ep=ep, replicas=reps,
                                                   prefill_replicas=pre, max_batch=0, redundant_experts=red)
                        if any(getattr(plan, k) != v for k, v in pins.items() if k != "max_batch"):
                            continue
                        if not serving_consistency(m, plan, n, sysm):
                            out.append(plan)
    return out


def count_plans(space: ServeSpace) -> int:
    batches = [space.pins["max_batch"]] if "max_batch" in space.pins else space.batches
    return len(serve_layouts(space)) * len(batches)


def _evaluate(args) -> list[ServeCandidate]:
    """All batch limits of one layout (runs in a worker process)."""
    from narrowpath.schedule.serving_cost import ServingCost
    from narrowpath.schedule.serving_defaults import resolve_formats, resolve_limits
    from narrowpath.schedule.serving_steady import steady_lane
    space, layout, batches, slo_ttft, slo_tpot, stat, cal = args
    out = []
    cost = None
    for B in batches:
        plan = dataclasses.replace(layout, max_batch=B)
        scn = ServingScenario(name="search", system=space.system, model=space.model, plan=plan, load=space.load,
                              num_gpus=space.num_gpus, calibration=cal)
        try:
            if cost is None:
                big = dataclasses.replace(scn, plan=dataclasses.replace(plan, max_batch=max(batches)))
                r_scn, lim = resolve_limits(resolve_formats(big, ()))
                cost = ServingCost(r_scn, max(lim.max_num_tokens, lim.max_batch * (1 + plan.spec_tokens)), cal)
            s = steady_lane(scn, cost, cal)
            ttft, tpot = s.ttft_s[stat], s.tpot_s[stat]
            if not (ttft > 0 and tpot > 0):
                raise NarrowpathError(f"{plan}: no request measured after the warm-up")
            out.append(ServeCandidate(plan, s.output_tokens_per_s / space.num_gpus, ttft, tpot,
                                      ttft <= slo_ttft and tpot <= slo_tpot))
        except NarrowpathError as exc:
            out.append(ServeCandidate(plan, failure=str(exc)))
    return out


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
    if jobs > 1 and len(work) > 1:
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            parts = list(pool.map(_evaluate, work, chunksize=max(1, len(work) // (4 * jobs))))
    else:
        parts = [_evaluate(w) for w in work]
    cands = [c for part in parts for c in part]
    failed = [c for c in cands if c.failure]
    ok = [c for c in cands if not c.failure]
    key = (lambda c: (-c.output_tokens_per_s_per_gpu, c.tpot_s, c.plan.tp, c.plan.pp, c.plan.dp, c.plan.ep,
                      c.plan.prefill_replicas, c.plan.max_batch))
    ranked = sorted((c for c in ok if c.meets_slo), key=key)
    missed = sorted((c for c in ok if not c.meets_slo), key=key)
    return ServeSearchResult(tuple(ranked), tuple(missed), total, len(failed), failed[0].failure if failed else "",
                             time.perf_counter() - t0, stat)
