"""Evaluate every plan of a search space with the closed-form step model and rank the ones that fit in memory.

Objectives (ties broken by the next key, then by the plan's knobs so the order is reproducible):
    time     step time, then memory per rank
    energy   energy per step (the analysis ledger: arithmetic + data movement per level + static power),
             then step time
    memory   memory per rank of the most loaded stage, then step time
Plans the model cannot place or price (a NarrowpathError from predict) are counted as failed, with the first
message kept, and left out of the ranking.

Before pricing, the space is counted and a few plans are priced to time them: a search that would take longer
than `max_seconds` (a plan at 16 M GPUs takes over a second: every rank is placed) is refused up front with the
estimate; a long one is announced, and `progress` receives a line every few seconds. Worker processes ignore
SIGINT and are terminated the moment the search is left early (Ctrl-C, SIGTERM turned into an exception by the
CLI, an error), so no worker outlives it.

The base plan's rank is a competition rank on the objective's own metric (1 + the number of ranked plans strictly
better on it, a relative difference under 1e-9 counting as a tie), so a plan as fast as the best is rank 1 even
when the table lists an equally fast plan with less memory first. A base plan outside the space (it does not
match the pins) is priced anyway and ranked against the space the same way.
"""
from __future__ import annotations

import dataclasses
import multiprocessing
import os
import signal
import time
from dataclasses import dataclass
from typing import Callable

from narrowpath.analysis.scaling import ledger_energy_j
from narrowpath.errors import NarrowpathError
from narrowpath.schedule.step import StepPrediction, predict
from narrowpath.search.space import KNOBS, SearchSpace, candidate_plans
from narrowpath.spec.calibration import Calibration
from narrowpath.spec.plan import Plan
from narrowpath.spec.scenario import Scenario

OBJECTIVES = ("time", "energy", "memory")
_METRIC = {"time": "step_time_s", "energy": "energy_per_step_j", "memory": "memory_bytes"}
TIE_REL = 1e-9
"""Relative difference of the objective's metric below which two plans tie (floating-point sums of the same terms
in a different order)."""


@dataclass(frozen=True, slots=True)
class Candidate:
    """One evaluated plan."""

    plan: Plan
    step_time_s: float
    mfu: float
    tokens_per_s: float
    memory_bytes: float
    """Memory per rank of the most loaded pipeline stage."""
    capacity_bytes: float
    energy_per_step_j: float | None
    """Filled for the ranked plans shown (all fitting plans when the objective is energy)."""

    @property
    def fits(self) -> bool:
        return self.memory_bytes <= self.capacity_bytes

    @property
    def headroom_bytes(self) -> float:
        return self.capacity_bytes - self.memory_bytes


@dataclass(frozen=True, slots=True)
class SearchResult:
    base: Scenario
    objective: str
    ranked: tuple[Candidate, ...]
    """Plans that fit, best first (of plans differing only in an equally costed recompute, the lightest)."""
    baseline: Candidate | None
    """The base scenario's own plan, evaluated (None when it is inconsistent with the space's GPU count or batch, or
    the model could not place it)."""
    baseline_rank: int | None
    """Competition rank of the base plan among `ranked` on the objective's metric (None when it does not fit with
    the required headroom, or is absent)."""
    num_plans: int
    """Plans enumerated (consistent with the model, system and batch)."""
    num_fit: int
    """Plans priced that fit in device memory."""
    num_failed: int
    first_failure: str | None
    elapsed_s: float
    min_free_bytes: float = 0.0
    baseline_in_space: bool = True
    """Whether the base plan is one of the space's plans (False: it does not match the pins, priced apart)."""
    pinned: tuple[tuple[str, object], ...] = ()
    """The pinned knobs, (name, value) sorted by name."""

    def versus_baseline(self, c: Candidate) -> int:
        """-1 when `c` beats the base plan on the objective's metric by more than the tie tolerance, 0 for a tie,
        1 when it is worse."""
        assert self.baseline is not None
        x, y = _metric(c, self.objective), _metric(self.baseline, self.objective)
        if x < y - TIE_REL * abs(y):
            return -1
        return 1 if x > y + TIE_REL * abs(y) else 0


def _plan_key(plan: Plan) -> tuple:
    return tuple((str(getattr(plan, k)) if isinstance(getattr(plan, k), str) else getattr(plan, k)) for k in KNOBS)


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


def _candidate(pred: StepPrediction, energy: bool) -> Candidate:
    return Candidate(pred.scenario.plan, pred.step_time_s, pred.mfu, pred.tokens_per_s, pred.memory.total_bytes,
                     pred.memory.capacity_bytes, ledger_energy_j(pred) if energy else None)


@dataclass(frozen=True, slots=True)
class _Priced:
    """What pricing a batch of plans gives: all the plans' candidates (fitting or not), and the failures."""

    candidates: list[Candidate]
    failures: list[tuple[int, str]]
    """(position of the plan in the enumeration, message)."""


def _price(job: tuple) -> _Priced:
    """Price `plans` (each with its position); top level so that worker processes can run it."""
    base, space, plans, calibration, min_free_bytes, energy_all = job
    cands, failures = [], []
    for i, plan in plans:
        try:
            pred = predict(_scenario(base, space, plan), calibration)
        except NarrowpathError as exc:
            failures.append((i, f"{describe_plan(plan)}: {exc}"))
            continue
        fits = pred.memory.capacity_bytes - pred.memory.total_bytes >= min_free_bytes
        cands.append(_candidate(pred, energy_all and fits))
    return _Priced(cands, failures)


ANNOUNCE_S = 10.0
"""A search estimated to take longer than this is announced through `progress` (with its estimate)."""
PROGRESS_EVERY_S = 3.0
"""Seconds between progress lines."""
TIMED_PLANS = 3
"""Plans priced one by one first to estimate the time per plan (the fastest counts: the first is cold)."""


class _Progress:
    """Progress lines for a long pricing run: done/total, rate and time left, at most every PROGRESS_EVERY_S."""

    def __init__(self, total: int, sink: Callable[[str], None] | None, done: int = 0):
        self.total, self.sink, self.done = total, sink, done
        self.t0 = self.last = time.perf_counter()

    def add(self, n: int) -> None:
        self.done += n
        now = time.perf_counter()
        if self.sink is None or now - self.last < PROGRESS_EVERY_S or self.done >= self.total:
            return
        self.last = now
        left = (now - self.t0) / max(1, self.done) * (self.total - self.done) if self.done else float("nan")
        self.sink(f"search: priced {self.done:,} of {self.total:,} plans ({self.done / self.total:.0%}), "
                  f"about {human_duration(left)} left")


def human_duration(seconds: float) -> str:
    """12 s, 3.5 min, 4.2 h, 3.1 days."""
    if not seconds == seconds:  # NaN
        return "? s"
    for unit, size in (("days", 86400.0), ("h", 3600.0), ("min", 60.0)):
        if seconds >= 2 * size:
            return f"{seconds / size:.1f} {unit}"
    return f"{seconds:.0f} s"


def _worker_init() -> None:
    """In a pricing worker: Ctrl-C is the parent's to handle (it terminates the pool), SIGTERM kills at once (the
    parent's handler, inherited by fork, would raise inside the worker), and the worker dies with its parent."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:  # Linux: SIGTERM when the parent dies, even by SIGKILL
        import ctypes
        ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG = 1
    except (OSError, AttributeError):
        pass


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity mask where the OS reports one)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _merge(parts: list[_Priced]) -> _Priced:
    return _Priced([c for p in parts for c in p.candidates], sorted(f for p in parts for f in p.failures))


def _price_all(jobs: int, base: Scenario, space: SearchSpace, numbered: list[tuple[int, Plan]],
               calibration: Calibration | None, min_free_bytes: float, energy_all: bool,
               progress: _Progress) -> _Priced:
    """Price the numbered plans in `jobs` processes (in-process for 1), in interleaved chunks (neighbouring plans
    cost alike) so that progress can be reported as chunks finish."""
    jobs = min(jobs, usable_cpus())  # more workers than CPUs only add processes (~100+ MB each) and memory
    job = lambda chunk: (base, space, chunk, calibration, min_free_bytes, energy_all)  # noqa: E731
    if jobs <= 1 or len(numbered) < 2 * jobs:
        size = max(1, len(numbered) // 100)
        parts = []
        for k in range(0, len(numbered), size):
            parts.append(_price(job(numbered[k:k + size])))
            progress.add(len(numbered[k:k + size]))
        return _merge(parts)
    num_chunks = min(len(numbered), jobs * 16)
    chunks = [numbered[k::num_chunks] for k in range(num_chunks)]
    pool = multiprocessing.get_context().Pool(jobs, initializer=_worker_init)
    try:
        parts = []
        for part in pool.imap_unordered(_price, [job(c) for c in chunks]):
            parts.append(part)
            progress.add(len(part.candidates) + len(part.failures))
        pool.close()
    except BaseException:  # Ctrl-C, SIGTERM (as an exception), an error: no worker outlives the search
        pool.terminate()
        raise
    finally:
        pool.join()
    return _merge(parts)


def _estimate(base: Scenario, space: SearchSpace, numbered: list[tuple[int, Plan]], calibration, min_free_bytes,
              energy_all, jobs: int, max_seconds: float | None, say: Callable[[str], None] | None) -> _Priced:
    """Price the first TIMED_PLANS plans one by one; refuse when the rest would take longer than `max_seconds`,
    announce it when it takes longer than ANNOUNCE_S. Returns what was priced."""
    parts, fastest = [], float("inf")
    for item in numbered[:TIMED_PLANS]:
        t0 = time.perf_counter()
        parts.append(_price((base, space, [item], calibration, min_free_bytes, energy_all)))
        fastest = min(fastest, time.perf_counter() - t0)
    rest = len(numbered) - len(parts)
    est = fastest * rest / max(1, min(jobs, usable_cpus())) if rest else 0.0
    where = f"{len(numbered):,} plans of {space.model.name} on {space.num_gpus:,} GPUs at about {fastest:.2g} s each"
    if max_seconds is not None and est > max_seconds:
        raise NarrowpathError(f"search: {where} would take about {human_duration(est)} on {min(jobs, usable_cpus())} "
                              f"process(es), more than the {human_duration(max_seconds)} allowed; pin knobs "
                              "(e.g. --tp, --pp, --cp, --mbs, --recompute, --zero) or raise --max-minutes")
    if say is not None and est > ANNOUNCE_S:
        say(f"search: {where}: about {human_duration(est)} on {min(jobs, usable_cpus())} process(es) "
            "(progress every few seconds; Ctrl-C stops it)")
    return _merge(parts)


def search(base: Scenario, space: SearchSpace, *, objective: str = "time", top: int = 10,
           calibration: Calibration | None = None, max_plans: int = 200_000,
           min_free_bytes: float = 0.0, jobs: int = 1, max_seconds: float | None = None,
           progress: Callable[[str], None] | None = None) -> SearchResult:
    """Rank the plans of `space` for `base`'s model and system (base supplies the mode, name and calibration).

    A plan counts as fitting when it leaves at least `min_free_bytes` of device memory free per GPU. `jobs` > 1
    prices the plans in that many worker processes, at most one per usable CPU (the result is the same: the
    ranking is a total order). A space estimated to take longer than `max_seconds` (None: no limit) is refused
    before it is priced; `progress` receives the announcement of a long search and a line every few seconds."""
    key = sort_key(objective)
    if base.mode != "training":
        raise NarrowpathError(f"mode: {base.mode!r} is not modelled yet; search ranks training plans only")
    if top < 1:
        raise NarrowpathError(f"top: must be >= 1, got {top}")
    if jobs < 1:
        raise NarrowpathError(f"jobs: must be >= 1, got {jobs}")
    t0 = time.perf_counter()
    energy_all = objective == "energy"
    plans = []
    for plan in candidate_plans(space):
        plans.append(plan)
        if len(plans) > max_plans:
            raise NarrowpathError(f"search: more than {max_plans} plans in the space; pin some knobs "
                                  "(e.g. --tp, --pp, --recompute) or raise --max-plans")
    numbered = list(enumerate(plans))
    first = _estimate(base, space, numbered, calibration, min_free_bytes, energy_all, jobs, max_seconds, progress)
    rest = _price_all(jobs, base, space, numbered[TIMED_PLANS:], calibration, min_free_bytes, energy_all,
                      _Progress(len(numbered), progress, done=min(TIMED_PLANS, len(numbered))))
    priced = _merge([first, rest])
    num, failed = len(plans), len(priced.failures)
    first_failure = priced.failures[0][1] if priced.failures else None
    baseline = next((c for c in priced.candidates if c.plan == space.base), None)
    in_space = baseline is not None
    if baseline is None:
        baseline = _price_outside(base, space, calibration)
    cands = [c for c in priced.candidates if c.headroom_bytes >= min_free_bytes]
    num_fit = len(cands)
    cands = _drop_equivalent(sorted(cands, key=key))
    if not energy_all:  # energy only for what is shown: re-predict those few (keeping every prediction costs GBs)
        cands = [_with_energy(c, base, space, calibration) if i < top else c for i, c in enumerate(cands)]
    base_fits = baseline is not None and baseline.headroom_bytes >= min_free_bytes
    if base_fits and baseline.energy_per_step_j is None:
        baseline = _with_energy(baseline, base, space, calibration)
    result = SearchResult(base, objective, tuple(cands), baseline, None, num, num_fit, failed, first_failure,
                          time.perf_counter() - t0, min_free_bytes, in_space, tuple(sorted(space.pinned.items())))
    if base_fits:  # competition ranking on the objective's metric: ties share a rank
        result = dataclasses.replace(result, baseline_rank=1 + sum(result.versus_baseline(c) < 0 for c in cands))
    return result


def _price_outside(base: Scenario, space: SearchSpace, calibration: Calibration | None) -> Candidate | None:
    """The base plan priced apart when it is not in the space (it does not match the pins): None when it does not
    describe the space's GPU count and batch, or the model cannot place it."""
    b = space.base
    if b.num_gpus != space.num_gpus or b.gbs != space.gbs:
        return None
    try:
        return _candidate(predict(_scenario(base, space, b), calibration), False)
    except NarrowpathError:
        return None


_RECOMPUTE_ORDER = {"none": 0, "selective": 1, "full": 2}


def _drop_equivalent(ranked: list[Candidate]) -> list[Candidate]:
    """Keep one of the plans that differ only in `recompute` and cost the same time and memory (e.g. selective
    recompute with a flash kernel re-runs nothing): the one that recomputes least."""
    best: dict[tuple, Candidate] = {}
    for c in ranked:
        k = (dataclasses.replace(c.plan, recompute="none"), c.step_time_s, c.memory_bytes)
        if k not in best or _RECOMPUTE_ORDER[c.plan.recompute] < _RECOMPUTE_ORDER[best[k].plan.recompute]:
            best[k] = c
    keep = {id(c) for c in best.values()}
    return [c for c in ranked if id(c) in keep]


def _scenario(base: Scenario, space: SearchSpace, plan: Plan) -> Scenario:
    return dataclasses.replace(base, model=space.model, system=space.system, num_gpus=space.num_gpus, plan=plan)


def _with_energy(c: Candidate, base: Scenario, space: SearchSpace, calibration: Calibration | None) -> Candidate:
    return dataclasses.replace(c, energy_per_step_j=ledger_energy_j(predict(_scenario(base, space, c.plan),
                                                                            calibration)))


def describe_plan(plan: Plan) -> str:
    """One-line summary of a plan's searched knobs."""
    return (f"tp={plan.tp} pp={plan.pp} vpp={plan.vpp} cp={plan.cp} dp={plan.dp} ep={plan.ep} mbs={plan.mbs} "
            f"zero={plan.zero_stage} recompute={plan.recompute} sp={plan.sequence_parallel}")
