"""Lay out the placements a search prices: the span of every parallel group (and, on an oversubscribed fabric, the
slowdown of its concurrent traffic), which at large GPU counts costs more than all the rest of a search.

A placement is laid out once and serves every plan with the same tp, cp, dp, pp, ep, etp and placement order. The
first one is timed; a search whose placements would take longer than allowed is refused with the estimate, a long
one is announced and, with worker processes, laid out in parallel before pricing.
"""
from __future__ import annotations

import time

import numpy as np

from narrowpath.network.contention import concurrent_slowdown
from narrowpath.schedule.step import _span, sync_group
from narrowpath.search.each import run_pool

PARALLEL_ABOVE_S = 2.0
"""Estimated layout time above which worker processes (when allowed) lay the placements out up front."""


def axes_of(plan, moe: bool) -> list[str]:
    """Transfer axes whose groups a plan's transfers run on (schedule.step._span's names)."""
    out = []
    if plan.tp > 1:
        out.append("tp")
    if plan.cp > 1:
        out.append("cp")
    if plan.dp * plan.cp > 1:
        out.append("dp")
    if plan.pp > 1:
        out += ["pp", "pp_ends"]
    if moe:
        out += ["ep", "edp", "etp", "ep_inter", "ep_intra"]
    return out


def lay_out(job: tuple) -> tuple:
    """(key, spans, slowdowns) of one placement; top level so that worker processes can run it."""
    key, scn = job
    spans: dict = {}
    slow: dict = {}
    out = scn.system.tier("scale_out")
    for axis in axes_of(scn.plan, scn.model.moe is not None):
        span = _span(scn, axis, spans)
        if span.crosses_scale_out and out.oversubscription > 1 and axis in ("tp", "cp", "ep", "dp", "edp", "pp",
                                                                             "ep_inter"):
            slow[("slowdown", axis)] = concurrent_slowdown(scn.plan, scn.system, sync_group(axis, scn.plan))
    return key, spans, slow


def placements_of(eng, rows: np.ndarray) -> list[tuple[tuple, int]]:
    """(placement key, a plan index with it) of every placement the plans of `rows` use."""
    t = eng.t
    blocks = np.unique(t.cols["block"][rows])
    out, seen = [], set()
    first_row = {}
    for r in rows[np.argsort(t.cols["block"][rows], kind="stable")]:
        first_row.setdefault(int(t.cols["block"][r]), int(r))
    for b in blocks:
        r = first_row[int(b)]
        outer = tuple(int(t.cols[k][r]) for k in ("tp", "cp", "dp", "pp", "ep", "etp"))
        for j in range(int(t.comm_start[b]), int(t.comm_start[b + 1])):
            key = outer + (int(t.comm["plc"][j]),)
            if key not in seen:
                seen.add(key)
                out.append((key, int(t.starts[r] + j - t.comm_start[b])))
    return out


def lay_out_all(eng, rows: np.ndarray, max_seconds: float | None, say, elapsed_s: float) -> None:
    """Estimate (and refuse, announce, or parallelise) laying out the placements of `rows` (see module docstring)."""
    todo = placements_of(eng, rows)
    if not todo:
        return
    from narrowpath.search.rank import TIMED_PLANS, _Progress, estimate_or_refuse
    P = eng.parts
    index = lambda key, i: P.layout(key, lambda: eng.t.fields(i))  # noqa: E731
    # time placements not laid out yet (the base plan's was, by its prediction): the median of three
    b = eng.space.base
    own = (b.tp, b.cp, b.dp, b.pp, b.ep, b.etp)
    order = sorted(range(len(todo)), key=lambda k: todo[k][0][:6] == own)
    todo = [todo[k] for k in order]
    timed = []
    for key, i in todo[:TIMED_PLANS]:
        t0 = time.perf_counter()
        k = index(key, i)
        _install(P, k, lay_out((key, P.layout_list[k].scn)))
        timed.append(time.perf_counter() - t0)
    each = float(np.median(timed))
    rest = todo[TIMED_PLANS:]
    if not rest:
        return
    space = eng.space
    est = estimate_or_refuse(f"{len(eng.t):,} plans of {space.model.name} on {space.num_gpus:,} GPUs with "
                             f"{len(todo):,} placements to lay out", len(rest), each, eng.jobs, max_seconds, say,
                             "e.g. --tp, --pp, --cp, --placement", spent_s=elapsed_s)
    if est <= PARALLEL_ABOVE_S:
        return  # laid out as pricing reaches them
    jobs_args = [(key, P.layout_list[index(key, i)].scn) for key, i in rest]
    prog = _Progress(len(jobs_args), say, what="placements")

    def got(result):
        _install(P, P.layouts[result[0]], result)
        prog.add(1)
    if eng.jobs > 1:
        run_pool(lay_out, jobs_args, eng.jobs, got)
    else:
        for job in jobs_args:
            got(lay_out(job))


def _install(P, index: int, result: tuple) -> None:
    _, spans, slow = result
    lay = P.layout_list[index]
    lay.spans.update(spans)
    lay.cache.update(slow)
