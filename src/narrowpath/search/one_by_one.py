"""A search that prices every plan with predict: a recurrent (LSTM) model's space, a few dozen plans, which the bulk
path (transformer layers, pipeline stages) does not cover. The first search's algorithm: time a few plans, refuse
or announce a long run, price the rest (in worker processes when asked), rank."""
from __future__ import annotations

import time

from narrowpath.search.each import human_duration, merge, price, price_all, usable_cpus
from narrowpath.search.rank import (ANNOUNCE_S, TIMED_PLANS, NarrowpathError, SearchResult, _Progress,
                                    drop_equivalent, price_outside, with_energy)


def search_each(base, space, table, key, objective, top, calibration, min_free_bytes, jobs, max_seconds, progress,
                t0) -> SearchResult:
    energy_all = objective == "energy"
    numbered = [(i, table.plan(i)) for i in range(len(table))]
    parts, fastest = [], float("inf")
    for item in numbered[:TIMED_PLANS]:
        t1 = time.perf_counter()
        parts.append(price((base, space, [item], calibration, min_free_bytes, energy_all)))
        fastest = min(fastest, time.perf_counter() - t1)
    rest = len(numbered) - len(parts)
    est = fastest * rest / max(1, min(jobs, usable_cpus())) if rest else 0.0
    where = f"{len(numbered):,} plans of {space.model.name} on {space.num_gpus:,} GPUs at about {fastest:.2g} s each"
    if max_seconds is not None and est > max_seconds:
        raise NarrowpathError(f"search: {where} would take about {human_duration(est)} on {jobs} process(es), more "
                              f"than the {human_duration(max_seconds)} allowed; pin knobs (e.g. --tp, --mbs) or "
                              "raise --max-minutes")
    if progress is not None and est > ANNOUNCE_S:
        progress(f"search: {where}: about {human_duration(est)} on {jobs} process(es) (progress every few seconds; "
                 "Ctrl-C stops it)")
    parts.append(price_all(jobs, base, space, numbered[TIMED_PLANS:], calibration, min_free_bytes, energy_all,
                           _Progress(len(numbered), progress, done=min(TIMED_PLANS, len(numbered)))))
    priced = merge(parts)
    failed = len(priced.failures)
    first_failure = priced.failures[0][1] if priced.failures else None
    by_index = dict(priced.candidates)
    baseline = by_index.get(table.base_row) if table.base_row is not None else None
    in_space = table.base_row is not None
    if baseline is None and not in_space:
        baseline = price_outside(base, space, calibration)
    cands = [c for _, c in priced.candidates if c.headroom_bytes >= min_free_bytes]
    num_fit = len(cands)
    cands = drop_equivalent(sorted(cands, key=key))
    if not energy_all:
        cands = [with_energy(c, base, space, calibration) if i < top else c for i, c in enumerate(cands)]
    base_fits = baseline is not None and baseline.headroom_bytes >= min_free_bytes
    if base_fits and baseline.energy_per_step_j is None:
        baseline = with_energy(baseline, base, space, calibration)
    result = SearchResult(base, objective, tuple(cands), baseline, None, len(table), num_fit, failed, first_failure,
                          time.perf_counter() - t0, min_free_bytes, in_space, tuple(sorted(space.pinned.items())),
                          len(numbered) - failed, len(cands), 0, space.extent)
    if base_fits:  # competition ranking on the objective's metric: ties share a rank
        rank = 1 + sum(result.versus_baseline(c) < 0 for c in cands)
        ties = sum(1 for c in cands if result.versus_baseline(c) == 0 and c.plan != baseline.plan)
        result = SearchResult(**{**{f: getattr(result, f) for f in result.__slots__}, "baseline_rank": rank,
                                 "baseline_ties": ties})
    return result
