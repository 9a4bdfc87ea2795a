"""Rank the plans of a search space by the closed-form step model and keep the ones that fit in memory.

Objectives (ties broken by the next key, then by the plan's knobs so the order is reproducible):
    time     step time, then memory per rank
    energy   energy per step (the analysis ledger: arithmetic + data movement per level + static power),
             then step time
    memory   memory per rank of the most loaded stage, then step time
Transformer spaces are priced in bulk and pruned with bounds (search.engine; docs/search.md); a recurrent model's
small space is priced plan by plan with predict (search.each). Either way the plans shown carry exactly the numbers
`predict` prints for them. Plans the model cannot place or price (a NarrowpathError from predict) are counted as
failed, with the first message kept, and left out of the ranking.

The base plan's rank is a competition rank on the objective's own metric (1 + the number of distinct fitting
plans strictly better on it, a relative difference under 1e-9 counting as a tie), so a plan as fast as the best is
rank 1 even when the table lists an equally fast plan with less memory first. A transformer's time ranking counts
at most `rank_limit` plans faster than the base plan (default RANK_LIMIT; None: all of them): beyond that the base
plan is said to rank beyond that place (`baseline_rank_beyond`) and only the best plans are looked for — counting
them all means pricing every plan faster than it. A base plan outside the space (it
does not match the pins) is priced anyway and ranked against the space the same way.

Before a long search the work is estimated: a space whose placements (at 16 M GPUs every rank is placed) or whose
energy ledgers would take longer than `max_seconds` is refused up front with the estimate; a long one is announced,
and `progress` receives a line every few seconds. Worker processes (placements, ledgers, a recurrent model's plans)
ignore SIGINT and are terminated the moment the search is left early, so no worker outlives it.
"""
from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import Callable, Sequence

from narrowpath.errors import NarrowpathError
from narrowpath.search.each import (Candidate, Progress, candidate, describe_plan, human_duration, scenario_of,
                                    usable_cpus)
from narrowpath.search.space import KNOBS, SearchSpace
from narrowpath.search.table import build_table
from narrowpath.spec.calibration import Calibration
from narrowpath.spec.plan import Plan
from narrowpath.spec.scenario import Scenario
from narrowpath.workload.recompute import modules_of

OBJECTIVES = ("time", "energy", "memory")
_METRIC = {"time": "step_time_s", "energy": "energy_per_step_j", "memory": "memory_bytes"}
TIE_REL = 1e-9
"""Relative difference of the objective's metric below which two plans tie (floating-point sums of the same terms
in a different order)."""
ANNOUNCE_S = 10.0
"""A search estimated to take longer than this is announced through `progress` (with its estimate)."""
PROGRESS_EVERY_S = 3.0
"""Seconds between progress lines."""
TIMED_PLANS = 3
"""Plans (or placements, or ledgers) priced one by one first to estimate the time of the rest (the fastest
counts: the first is cold)."""
MAX_PLANS = 10 ** 10
"""Default refusal size of a space (counted without building its plans)."""
RANK_LIMIT = 10_000
"""Default `rank_limit`: a time ranking counts the plans faster than the base plan up to this many and then only
looks for the best (the DeepSeek-V3 catalog search priced 2.5 M plans in full to place its base plan 239,888th)."""

__all__ = ["OBJECTIVES", "RANK_LIMIT", "TIE_REL", "Candidate", "SearchResult", "describe_plan", "search", "sort_key",
           "human_duration", "usable_cpus"]


@dataclass(frozen=True, slots=True)
class SearchResult:
    base: Scenario
    objective: str
    ranked: Sequence[Candidate]
    """The best plans that fit, best first (of plans differing only in an equally costed recompute, the lightest):
    at least the first `top`, and every plan down to the base plan's rank when that is at most
    search.engine.RANK_HEAD and was counted (not past `rank_limit`)."""
    baseline: Candidate | None
    """The base scenario's own plan, evaluated (None when it is inconsistent with the space's GPU count or batch, or
    the model could not place it)."""
    baseline_rank: int | None
    """Competition rank of the base plan among the distinct fitting plans on the objective's metric (None when it
    does not fit with the required headroom, or is absent)."""
    num_plans: int
    """Plans in the space (consistent with the model, system and batch)."""
    num_fit: int
    """Plans that fit in device memory with the required headroom."""
    num_failed: int
    first_failure: str | None
    elapsed_s: float
    min_free_bytes: float = 0.0
    baseline_in_space: bool = True
    """Whether the base plan is one of the space's plans (False: it does not match the pins, priced apart)."""
    pinned: tuple[tuple[str, object], ...] = ()
    """The pinned knobs, (name, value) sorted by name."""
    num_priced: int = 0
    """Plans whose step time was computed in full (the rest were pruned by their bounds)."""
    num_ranked: int = 0
    """Distinct plans that fit (what the base plan's rank is out of)."""
    baseline_ties: int = 0
    """Other distinct fitting plans that tie with the base plan on the objective's metric."""
    extent: str = "full"
    baseline_rank_beyond: int | None = None
    """Set (to the search's `rank_limit`) when at least that many distinct fitting plans are faster than the base
    plan in a time ranking: they were not all visited, its exact rank is not known (`baseline_rank` is then None and
    `baseline_ties` 0) — only that it ranks beyond that place."""

    @property
    def num_candidates(self) -> int:
        """The whole space before pruning (= num_plans)."""
        return self.num_plans

    def versus_baseline(self, c: Candidate) -> int:
        """-1 when `c` beats the base plan on the objective's metric by more than the tie tolerance, 0 for a tie,
        1 when it is worse."""
        assert self.baseline is not None
        x, y = _metric(c, self.objective), _metric(self.baseline, self.objective)
        if x < y - TIE_REL * abs(y):
            return -1
        return 1 if x > y + TIE_REL * abs(y) else 0


def _plan_key(plan: Plan) -> tuple:
    """The searched knobs in KNOBS order, then the recomputed modules (search.engine.Engine.plan_keys orders the
    same way)."""
    return tuple((str(getattr(plan, k)) if isinstance(getattr(plan, k), str) else getattr(plan, k))
                 for k in KNOBS) + (tuple(plan.recompute_modules),)


def _metric(c: Candidate, objective: str) -> float:
    return getattr(c, _METRIC[objective])


def sort_key(objective: str) -> Callable[[Candidate], tuple]:
    """Ranking key of an objective (smaller is better)."""
    if objective == "time":
        return lambda c: (c.step_time_s, c.memory_bytes, _plan_key(c.plan))
    if objective == "energy":
        return lambda c: (c.energy_per_step_j, c.step_time_s, _plan_key(c.plan))
    if objective == "memory":
        return lambda c: (c.memory_bytes, c.step_time_s, _plan_key(c.plan))
    raise NarrowpathError(f"objective: must be one of {', '.join(OBJECTIVES)}, got {objective!r}")


class _Progress(Progress):
    """Progress lines at most every PROGRESS_EVERY_S (this module's, so that it can be changed)."""

    def __init__(self, total: int, sink: Callable[[str], None] | None, done: int = 0, what: str = "plans"):
        super().__init__(total, sink, done, what, every_s=lambda: PROGRESS_EVERY_S)


def search(base: Scenario, space: SearchSpace, *, objective: str = "time", top: int = 10,
           calibration: Calibration | None = None, max_plans: int = MAX_PLANS,
           min_free_bytes: float = 0.0, jobs: int = 1, max_seconds: float | None = None,
           progress: Callable[[str], None] | None = None, table=None,
           rank_limit: int | None = RANK_LIMIT) -> SearchResult:
    """Rank the plans of `space` for `base`'s model and system (base supplies the mode, name and calibration).

    A plan counts as fitting when it leaves at least `min_free_bytes` of device memory free per GPU. `jobs` > 1
    lets worker processes (at most one per usable CPU) lay out placements, compute energy ledgers or price a
    recurrent model's plans (the result is the same: the ranking is a total order). A search estimated to take
    longer than `max_seconds` (None: no limit) is refused before the long part; `progress` receives the
    announcement of a long search and a line every few seconds. `table` is the space's search.table.PlanTable when
    the caller has built it already. `rank_limit`: see the module docstring."""
    key = sort_key(objective)
    if base.mode != "training":
        raise NarrowpathError(f"mode: {base.mode!r} is not modelled yet; search ranks training plans only")
    if top < 1:
        raise NarrowpathError(f"top: must be >= 1, got {top}")
    if jobs < 1:
        raise NarrowpathError(f"jobs: must be >= 1, got {jobs}")
    if rank_limit is not None and rank_limit < 1:
        raise NarrowpathError(f"rank_limit: must be >= 1, got {rank_limit}")
    t0 = time.perf_counter()
    jobs = min(jobs, usable_cpus())  # more workers than CPUs only add processes (~100+ MB each) and memory
    table = build_table(space) if table is None else table
    if len(table) > max_plans:
        raise NarrowpathError(f"search: more than {max_plans:,} plans in the space ({len(table):,}); pin some knobs "
                              "(e.g. --tp, --pp, --recompute) or raise --max-plans")
    if space.model.arch != "transformer":
        from narrowpath.search.one_by_one import search_each
        return search_each(base, space, table, key, objective, top, calibration, min_free_bytes, jobs,
                           max_seconds, progress, t0)
    from narrowpath.search.bulk_search import search_bulk
    return search_bulk(base, space, table, objective, top, calibration, min_free_bytes, jobs, max_seconds,
                       progress, t0, rank_limit)


def with_energy(c: Candidate, base: Scenario, space: SearchSpace, calibration: Calibration | None) -> Candidate:
    from narrowpath.analysis.scaling import ledger_energy_j
    from narrowpath.schedule.step import predict
    return dataclasses.replace(c, energy_per_step_j=ledger_energy_j(predict(scenario_of(base, space, c.plan),
                                                                            calibration)))


def price_outside(base: Scenario, space: SearchSpace, calibration: Calibration | None) -> Candidate | None:
    """The base plan priced apart when it is not in the space (it does not match the pins): None when it does not
    describe the space's GPU count and batch, or the model cannot place it."""
    from narrowpath.schedule.step import predict
    b = space.base
    if b.num_gpus != space.num_gpus or b.gbs != space.gbs:
        return None
    try:
        return candidate(predict(scenario_of(base, space, b), calibration), False)
    except NarrowpathError:
        return None


_PLAN_FIELDS = tuple(f.name for f in dataclasses.fields(Plan) if f.name not in ("recompute", "recompute_modules"))


def _without_recompute(plan: Plan) -> tuple:
    return tuple(getattr(plan, f) for f in _PLAN_FIELDS)


def _lighter(a: Plan, b: Plan) -> bool:
    """Whether `a` recomputes strictly less than `b` (of two plans that differ only in recompute): anything but full
    recompute is lighter than full; without it, a plan whose selectively recomputed modules are a proper subset of
    the other's, or the same set with recompute none or fewer modules named (recompute none's set: empty but under
    DeepSeek-V3's FP8 cache, which adds the MoE activation to every set; search.space.recomputed_modules). The same
    order as search.table.twin_strategies, so the plans dropped here are those the bulk search counts once."""
    if (a.recompute == "full") != (b.recompute == "full"):
        return b.recompute == "full"
    if a.recompute == "full":
        return False
    ma, mb = modules_of(a), modules_of(b)
    named = lambda p: (p.recompute != "none", len(p.recompute_modules))  # noqa: E731
    return ma < mb or (ma == mb and named(a) < named(b))


def drop_equivalent(ranked: list[Candidate]) -> list[Candidate]:
    """Keep one of the plans that differ only in `recompute` (and its modules) and cost the same time and memory
    (e.g. a dense layer's norms are fused into its projections, so recomputing `layernorm` re-runs nothing): the
    ones no lighter plan among them equals (`_lighter`)."""
    groups: dict[tuple, list[Candidate]] = {}
    for c in ranked:
        groups.setdefault((_without_recompute(c.plan), c.step_time_s, c.memory_bytes), []).append(c)
    keep = {id(c) for g in groups.values() for c in g if not any(_lighter(d.plan, c.plan) for d in g)}
    return [c for c in ranked if id(c) in keep]


def estimate_or_refuse(what: str, count: int, each_s: float, jobs: int, max_seconds: float | None,
                       say: Callable[[str], None] | None, hint: str, spent_s: float = 0.0) -> float:
    """Refuse work estimated (with the `spent_s` already spent) beyond `max_seconds`, announce it beyond ANNOUNCE_S;
    returns the estimate of the work left."""
    est = each_s * count / max(1, jobs)
    if max_seconds is not None and spent_s + est > max_seconds:
        raise NarrowpathError(f"search: {what} at about {each_s:.2g} s each would take about "
                              f"{human_duration(spent_s + est)} on {jobs} process(es), more than the "
                              f"{human_duration(max_seconds)} allowed; pin knobs ({hint}) or raise --max-minutes")
    if say is not None and est > ANNOUNCE_S:
        say(f"search: {what} at about {each_s:.2g} s each: about {human_duration(est)} on {jobs} process(es) "
            "(progress every few seconds; Ctrl-C stops it)")
    return est


