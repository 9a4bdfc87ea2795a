"""A transformer search end to end: the bulk engine (search.engine) per objective, then the result.

For every objective: the rows that fit are known from stage 1; the engine visits rows best bound first; what is
shown is priced again with predict; the base plan's rank and ties are counted over every distinct fitting plan
(plans that differ only in an equally costed recompute count once, decided on their parts: search.engine). A time
ranking stops counting the plans faster than the base plan at `rank_limit` of them: the visit then only needs the
best plans, and the base plan is reported as ranking beyond that (SearchResult.baseline_rank_beyond).
"""
from __future__ import annotations

import dataclasses
import time
from typing import Callable

import numpy as np

from narrowpath.search.each import Candidate, Progress, price_all
from narrowpath.search.engine import NEAR, RANK_HEAD, SAFE, Engine, kth_distinct
from narrowpath.search.layouts import lay_out_all
from narrowpath.search.rank import (TIE_REL, SearchResult, drop_equivalent, estimate_or_refuse, price_outside,
                                    sort_key, with_energy)


def search_bulk(base, space, table, objective: str, top: int, calibration, min_free: float, jobs: int,
                max_seconds: float | None, say: Callable[[str], None] | None, t0: float,
                rank_limit: int | None = None) -> SearchResult:
    eng = Engine(base, space, table, calibration, min_free, jobs, say)
    pinned = tuple(sorted(space.pinned.items()))
    if len(table) == 0:
        return SearchResult(base, objective, (), price_outside(base, space, calibration), None, 0, 0, 0, None,
                            time.perf_counter() - t0, min_free, False, pinned, extent=space.extent)
    eng.structural_all()
    fit_rows = np.flatnonzero(eng.fits)
    # the base plan, exactly
    in_space = table.base_row is not None
    if in_space:
        baseline = eng.exact_candidates(np.array([table.base_row]), energy=True)[0]
    else:
        baseline = price_outside(base, space, calibration)
    base_fits = baseline is not None and baseline.headroom_bytes >= min_free
    if baseline is not None and not base_fits:
        baseline = dataclasses.replace(baseline, energy_per_step_j=None)
    elif base_fits and baseline.energy_per_step_j is None:
        baseline = with_energy(baseline, base, space, calibration)
    lay_out_all(eng, fit_rows, max_seconds, say, time.perf_counter() - t0)
    equivalent = eng.equivalent_rows()
    num_fit = int(table.variants(fit_rows).sum())
    num_ranked = num_fit - int(table.variants(np.flatnonzero(equivalent & eng.fits)).sum())
    # a row that prices exactly as its lighter twin (decided on the parts) is not priced: the twin fits alike and
    # stands for it in the ranking (drop_equivalent would drop it)
    distinct_rows = fit_rows[~equivalent[fit_rows]]
    if objective == "memory":
        head, better, ties = _by_memory(eng, fit_rows, equivalent, baseline if base_fits else None, top)
    elif objective == "energy":
        head, better, ties = _by_energy(eng, distinct_rows, baseline if base_fits else None, top, max_seconds, say)
    else:
        head, better, ties = _by_time(eng, distinct_rows, baseline if base_fits else None, top, rank_limit)
    num_failed = len(eng.failures)
    first_failure = sorted(eng.failures)[0][1] if eng.failures else None
    rank = 1 + better if base_fits else None
    if base_fits and in_space:
        ties -= 1  # the base plan itself
    beyond = None
    if objective == "time" and rank_limit is not None and base_fits and better >= rank_limit:
        rank, ties, beyond = None, 0, rank_limit  # counted no further than rank_limit plans faster than it
    return SearchResult(base, objective, tuple(head), baseline, rank, len(table), num_fit - num_failed, num_failed,
                        first_failure, time.perf_counter() - t0, min_free, in_space, pinned, eng.num_priced,
                        num_ranked - num_failed, max(0, ties), space.extent, beyond)


# ---- the three rankings ----------------------------------------------------------------------------------------------
def _distinct(eng: Engine, idx: np.ndarray, T: np.ndarray, M: np.ndarray, sure: bool = False) -> np.ndarray:
    """False for plans with selective recompute whose recompute-none twin is among `idx` with the same time and
    memory (they are one plan to the ranking); with `sure`, also for those whose twin is not among `idx` (it might
    price the same: only plans certainly distinct are left True)."""
    tw = eng.twin_of(idx)
    order = np.argsort(idx)
    pos = np.clip(np.searchsorted(idx[order], tw), 0, max(0, idx.size - 1))
    found = (tw >= 0) & (idx[order][pos] == tw) if idx.size else np.zeros(0, dtype=bool)
    j = order[pos]
    out = ~(found & (T[j] == T) & (M[j] == M))
    return out & ((tw < 0) | found) if sure else out


def _reprice_near(eng: Engine, idx, T, thresholds) -> None:
    """Plans whose time lies within NEAR of a decision threshold get predict's own time."""
    near = np.zeros(idx.size, dtype=bool)
    for thr in thresholds:
        near |= np.abs(T - thr) <= NEAR * abs(thr)
    pick = np.flatnonzero(near)
    if pick.size:
        got = eng.exact_candidates(idx[pick], energy=False)
        for k, c in zip(pick, got):
            if c is not None:
                T[k] = c.step_time_s


def _reprice_tied(eng: Engine, idx, T, value: float) -> None:
    """Plans whose bulk time lies within the tie tolerance of the base plan's get predict's own time: a plan that
    costs exactly what the base plan costs (ZeRO-1 and ZeRO-2 at one micro-batch) shows the same number."""
    pick = np.flatnonzero((np.abs(T - value) <= TIE_REL * abs(value)) & (idx != (eng.t.base_row or -1)))
    if pick.size:
        for k, c in zip(pick, eng.exact_candidates(idx[pick], energy=False)):
            if c is not None:
                T[k] = c.step_time_s


def _head(eng: Engine, idx, T, M, limit: float, objective: str, top: int, primary: np.ndarray) -> list[Candidate]:
    """The ranked head: plans with primary metric ≤ limit, ordered, equivalents dropped, the first `top` priced
    again with predict (and with their energy)."""
    sel = np.flatnonzero(primary <= limit * (1 + SAFE))
    keys = eng.plan_keys(idx[sel])
    second = T[sel] if objective == "memory" else M[sel]
    order = np.lexsort(tuple(reversed([primary[sel], second] + keys)))
    sel = sel[order]
    cands = eng.candidates(idx[sel], T[sel], M[sel])
    where = {c.plan: int(i) for c, i in zip(cands, idx[sel])}
    return _exact_top(eng, drop_equivalent(cands), where, objective, top)


def _exact_top(eng: Engine, cands: list[Candidate], where: dict, objective: str, top: int) -> list[Candidate]:
    """Replace the first plans (the shown `top` and any within 1e-9 of the top-th on the metric) by predict's own
    candidates, with their energy, and re-order them by the exact numbers."""
    if not cands:
        return cands
    key = sort_key(objective)
    attr = {"time": "step_time_s", "memory": "memory_bytes", "energy": "energy_per_step_j"}[objective]
    edge = getattr(cands[min(top, len(cands)) - 1], attr)
    n = min(top, len(cands))
    while n < len(cands) and getattr(cands[n], attr) <= edge * (1 + 1e-9):
        n += 1
    idx = np.array([where[c.plan] for c in cands[:n]], dtype=np.int64)
    exact = [x for x in eng.exact_candidates(idx, energy=True) if x is not None]
    return drop_equivalent(sorted(exact, key=key)) + cands[n:]


def _by_time(eng: Engine, fit_rows, baseline: Candidate | None, top: int, rank_limit: int | None = None):
    order = fit_rows[np.argsort(eng.bound[fit_rows], kind="stable")]
    Tb = baseline.step_time_s if baseline is not None else -np.inf
    counted = baseline is None  # whether `rank_limit` plans certainly faster than the base plan have been found

    def threshold(idx, t):
        nonlocal counted
        if not counted and rank_limit is not None:
            faster = _distinct(eng, idx, t, eng.mem[eng.row_of(idx)], sure=True) & (t < Tb * (1 - 2 * TIE_REL))
            counted = int(faster.sum()) >= rank_limit
        return max(kth_distinct(t, top), -np.inf if counted else Tb * (1 + 2 * TIE_REL)) * (1 + SAFE)
    idx, T, _ = eng.visit(order, eng.bound[order], threshold, eng.lower_rows, _progress(eng, order))
    M = eng.mem[eng.row_of(idx)]
    b = eng.t.base_row
    if baseline is not None and b is not None:
        T[idx == b] = Tb
    better = ties = 0
    limit = kth_distinct(T, top)
    if baseline is not None:
        _reprice_near(eng, idx, T, (Tb * (1 - TIE_REL), Tb * (1 + TIE_REL)))
        _reprice_tied(eng, idx, T, Tb)
        d = _distinct(eng, idx, T, M)
        better = int((d & (T < Tb - TIE_REL * abs(Tb))).sum())
        ties = int((d & (np.abs(T - Tb) <= TIE_REL * abs(Tb))).sum())
        if better < RANK_HEAD and not counted:  # every plan down to the base plan was visited
            limit = max(limit, Tb * (1 + TIE_REL))
    return _head(eng, idx, T, M, limit, "time", top, T), better, ties


def _progress(eng: Engine, order) -> Progress | None:
    """Progress lines (plans visited) when the search has a sink for them."""
    if eng.say is None:
        return None
    from narrowpath.search.rank import _Progress
    return _Progress(int(eng.t.variants(order).sum()), eng.say, what="fitting plans (bounded or priced)")


def _by_memory(eng: Engine, fit_rows, equivalent, baseline: Candidate | None, top: int):
    t = eng.t
    order = fit_rows[np.argsort(eng.mem[fit_rows], kind="stable")]
    Mrow = eng.mem[order]
    cum = np.cumsum(t.variants(order))
    k = min(int(np.searchsorted(cum, top)), max(0, order.size - 1))
    limit = Mrow[k] if order.size else np.inf
    better = ties = 0
    if baseline is not None:
        Mb = baseline.memory_bytes
        distinct_var = t.variants(order) * ~equivalent[order]
        better = int(distinct_var[Mrow < Mb - TIE_REL * Mb].sum())
        ties = int(distinct_var[np.abs(Mrow - Mb) <= TIE_REL * Mb].sum())
        if better < RANK_HEAD:
            limit = max(limit, Mb * (1 + TIE_REL))
    rows = order[Mrow <= limit * (1 + SAFE)]
    idx, T = eng.price_rows(rows) if rows.size else (np.zeros(0, dtype=np.int64), np.zeros(0))
    M = eng.mem[eng.row_of(idx)]
    return _head(eng, idx, T, M, limit, "memory", top, M), better, ties


def _by_energy(eng: Engine, fit_rows, baseline: Candidate | None, top: int, max_seconds, say):
    """Rows in order of a lower bound of their plans' energy; their plans priced in bulk, then with predict and the
    ledger while the plan's own bound (with its exact time) stays under τ."""
    t = eng.t
    row_bound = eng.energy_bound(fit_rows, eng.bound[fit_rows])
    o = np.argsort(row_bound, kind="stable")
    order, key = fit_rows[o], row_bound[o]
    Eb = baseline.energy_per_step_j if baseline is not None else -np.inf
    # time one ledger to estimate the work: every plan whose bound is under the base plan's energy is priced
    t_ledger = _time_ledger(eng, order)
    count = int(t.variants(order[key <= Eb * (1 + SAFE)]).sum()) if baseline is not None else 0
    if baseline is not None:
        estimate_or_refuse(f"up to {count:,} energy ledgers of {eng.space.model.name} on {eng.space.num_gpus:,} "
                           "GPUs", count, t_ledger, eng.jobs, max_seconds, say,
                           "e.g. --tp, --pp, --cp, --mbs, --recompute, --zero, or --space basic")
    from narrowpath.search.rank import _Progress
    progress = _Progress(max(count, 1), say, what="energy ledgers (at most)")
    found: list[Candidate] = []
    got_idx: list[int] = []
    pos, batch = 0, 2048
    tau = np.inf
    cum = np.cumsum(t.variants(order))
    while pos < order.size and key[pos] * (1 - SAFE) <= tau:
        end = max(pos + 1, int(np.searchsorted(cum, (cum[pos - 1] if pos else 0) + batch, side="right")))
        idx, T = eng.price_rows(order[pos:end])
        lb = eng.energy_bound(eng.row_of(idx), T)
        pick = idx[lb * (1 - SAFE) <= tau]
        plans = [(int(i), t.plan(int(i))) for i in pick]
        priced = price_all(eng.jobs, eng.base, eng.space, plans, eng.cal_arg, eng.min_free, True, progress)
        eng.failures += priced.failures
        for i, c in priced.candidates:
            if c.headroom_bytes >= eng.min_free:
                found.append(c)
                got_idx.append(i)
        E = np.array([c.energy_per_step_j for c in found])
        tau = max(kth_distinct(E, top), Eb * (1 + 2 * TIE_REL)) * (1 + SAFE)
        pos, batch = end, batch * 2
    key_fn = sort_key("energy")
    ranked = drop_equivalent(sorted(found, key=key_fn))
    better = ties = 0
    if baseline is not None:
        better = sum(1 for c in ranked if c.energy_per_step_j < Eb - TIE_REL * abs(Eb))
        ties = sum(1 for c in ranked if abs(c.energy_per_step_j - Eb) <= TIE_REL * abs(Eb))
    limit = kth_distinct(np.array([c.energy_per_step_j for c in ranked]), top)
    if baseline is not None and better < RANK_HEAD:
        limit = max(limit, Eb * (1 + TIE_REL))
    return [c for c in ranked if c.energy_per_step_j <= limit * (1 + SAFE)], better, ties


def _time_ledger(eng: Engine, order) -> float:
    if not order.size:
        return 0.0
    i = int(eng.t.starts[order[0]])
    t0 = time.perf_counter()
    eng.exact_candidates(np.array([i]), energy=True)
    return time.perf_counter() - t0

