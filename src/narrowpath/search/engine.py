"""The whole space priced in bulk, pruned with bounds that are provably below what a plan can reach.

Stages of a search (docs/search.md):
1. every structural row (search.table) gets its memory and a lower bound of its step time (search.bulk): numbers
   every plan of the row shares;
2. the rows that fit are visited best bound first, a batch at a time, and every plan of a visited row is priced
   (search.exact); the visit stops at the first row whose bound exceeds the threshold τ: the `top`-th best distinct
   time found so far, or the base plan's time when that is larger (its rank counts every plan faster than it);
   a plan never visited has a bound above τ, so it can neither be shown nor be faster than the base plan;
3. the plans shown (and any whose order or tie with the base plan is decided within 1e-11 of a threshold) are
   priced again with `predict` itself, so what the search prints is exactly what `predict` prints.
Memory per plan is exact in bulk, so a memory ranking visits rows by memory. An energy ranking needs the analysis
ledger of a whole prediction per plan: it visits plans by a lower bound of their energy (static power × step time +
executed FLOPs × the cheapest pJ/FLOP of the device) and prices them with predict until the bound passes τ.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from narrowpath.analysis.energy import pj_per_flop
from narrowpath.analysis.ledger import element_bytes
from narrowpath.cost.power import clock_fraction
from narrowpath.errors import NarrowpathError
from narrowpath.schedule.step import predict
from narrowpath.search.bulk import Bulk, StructuralPrices
from narrowpath.search.each import Candidate, Progress, describe_plan, leaves_free, price_all, scenario_of, \
    space_scenario
from narrowpath.search.exact import Exact
from narrowpath.search.parts import Parts
from narrowpath.search.table import PlanTable, twin_strategies
from narrowpath.spec.plan import CP_COMM, EP_DISPATCH, PRECISIONS

TIE_REL = 1e-9
"""Relative difference of the objective's metric below which two plans tie."""
SAFE = 1e-8
"""Relative margin kept between a bound or threshold and a decision (float sums of the same terms in another order
differ by ~1e-15)."""
NEAR = 1e-11
"""A plan whose bulk number lies this close (relative) to a threshold is priced again with predict to decide."""
RANK_HEAD = 10_000
"""`ranked` lists every plan down to the base plan when it ranks at most this far down (else the top only)."""
STRUCT_CHUNK = 20_000
KEEP_CELLS = 2_000_000
"""Rows × classes below which the per-class structural prices are kept for the second pass (else recomputed)."""


class Engine:
    """One bulk search (see module docstring)."""

    def __init__(self, base, space, table: PlanTable, calibration, min_free_bytes: float, jobs: int,
                 say: Callable[[str], None] | None):
        self.base, self.space, self.t = base, space, table
        self.cal_arg = calibration
        self.parts = Parts(space_scenario(base, space), calibration)
        self.bulk = Bulk(table, self.parts)
        self.exact = Exact(self.bulk)
        self.cap = space.system.device.hbm.capacity_bytes
        self.min_free = min_free_bytes
        self.jobs, self.say = jobs, say
        self.num_priced = 0
        self.failures: list[tuple[int, str]] = []
        self._kept: StructuralPrices | None = None
        self.mem = np.zeros(0)
        self.bound = np.zeros(0)
        self.hw_flop = np.zeros(0)
        self.parts_id = np.zeros(0, dtype=np.int64)

    # ---- stage 1 -------------------------------------------------------------------------------------------------
    def structural_all(self) -> None:
        S = self.t.num_structural
        keep = S * self.bulk.Q <= KEEP_CELLS
        mem, bound, flop, kept = np.zeros(S), np.zeros(S), np.zeros(S), []
        parts = np.zeros(S, dtype=np.int64)
        for k in range(0, S, STRUCT_CHUNK):
            rows = np.arange(k, min(S, k + STRUCT_CHUNK))
            sp = self.bulk.structural(rows)
            mem[rows], bound[rows], flop[rows], parts[rows] = sp.memory_bytes, sp.bound_s, sp.hw_flop, sp.parts_id
            if keep:
                kept.append(sp)
        self.mem, self.bound, self.hw_flop, self.parts_id = mem, bound, flop, parts
        if keep and kept:
            self._kept = _concat(kept)
        self.fits = self._fits_rows()

    def _fits_rows(self) -> np.ndarray:
        head = self.cap - self.mem
        fits = head >= self.min_free
        near = np.flatnonzero(np.abs(head - self.min_free) <= NEAR * self.cap)
        for r in near:  # decide with predict's own memory
            pred = self._predict_index(int(self.t.starts[r]))
            if pred is not None:
                fits[r] = leaves_free(pred, self.min_free)
        return fits

    def prices(self, rows: np.ndarray) -> StructuralPrices:
        if self._kept is not None:
            return self._kept.take(rows)
        return self.bulk.structural(rows)

    # ---- stage 2 -------------------------------------------------------------------------------------------------
    def price_rows(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(plan index, step time) of every plan of the structural rows (bulk, predict where it fails)."""
        if not len(rows):
            return np.zeros(0, dtype=np.int64), np.zeros(0)
        sp = self.prices(rows)
        try:
            idx, t = self.exact.price_rows(sp, np.arange(len(rows)))
        except NarrowpathError:
            idx, t = self._price_one_by_one(rows)
        self.num_priced += idx.size
        return idx, t

    def _price_one_by_one(self, rows) -> tuple[np.ndarray, np.ndarray]:
        idx, times = [], []
        for r in rows:
            for i in range(int(self.t.starts[r]), int(self.t.starts[r + 1])):
                pred = self._predict_index(i)
                if pred is not None:
                    idx.append(i)
                    times.append(pred.step_time_s)
        return np.array(idx, dtype=np.int64), np.array(times)

    def _predict_index(self, i: int):
        plan = self.t.plan(i)
        try:
            return predict(scenario_of(self.base, self.space, plan), self.cal_arg)
        except NarrowpathError as exc:
            self.failures.append((i, f"{describe_plan(plan)}: {exc}"))
            return None

    def visit(self, order: np.ndarray, key: np.ndarray, threshold: Callable[[np.ndarray, np.ndarray], float],
              lower: Callable[[np.ndarray], np.ndarray] | None = None, progress=None
              ) -> tuple[np.ndarray, np.ndarray, float]:
        """Price the rows of `order` (sorted by `key`, a lower bound of the metric the threshold is on) a batch at a
        time while key·(1 − SAFE) ≤ threshold(priced indices, priced times); `lower(rows)`, a tighter lower bound
        per row, skips rows it puts above the threshold. Returns (plan index, time, final τ)."""
        idx_parts, t_parts = [], []
        pos, batch, tau, pos_before = 0, 4096, np.inf, 0
        var = self.t.variants(order)
        cum = np.cumsum(var)
        while pos < order.size:
            if idx_parts:
                tau = threshold(np.concatenate(idx_parts), np.concatenate(t_parts))
            if key[pos] * (1 - SAFE) > tau:
                break
            end = int(np.searchsorted(cum, (cum[pos - 1] if pos else 0) + batch, side="right"))
            end = max(end, pos + 1)
            stop = int(np.searchsorted(key, tau / (1 - SAFE), side="right"))
            end = min(end, max(stop, pos + 1))
            rows = order[pos:end]
            if np.isfinite(tau) and lower is not None:  # a row whose every plan is bounded above τ is not priced
                rows = rows[lower(rows) * (1 - SAFE) <= tau]
            i, t = self.price_rows(rows)
            idx_parts.append(i)
            t_parts.append(t)
            pos, batch = end, min(batch * 2, 1 << 20)
            if progress is not None:
                progress.add(int(cum[end - 1] - (cum[pos_before - 1] if pos_before else 0)))
            pos_before = pos
        if idx_parts and pos < order.size:
            tau = threshold(np.concatenate(idx_parts), np.concatenate(t_parts))
        elif pos >= order.size:
            tau = np.inf
        idx = np.concatenate(idx_parts) if idx_parts else np.zeros(0, dtype=np.int64)
        return idx, (np.concatenate(t_parts) if t_parts else np.zeros(0)), tau

    # ---- plan attributes ---------------------------------------------------------------------------------------------
    def row_of(self, idx: np.ndarray) -> np.ndarray:
        return np.searchsorted(self.t.starts, idx, side="right") - 1

    def plan_keys(self, idx: np.ndarray) -> list[np.ndarray]:
        """Sort keys of plans that order them as search.rank's plan key (the searched knobs, in KNOBS order)."""
        t = self.t
        s, j = t.locate(idx)
        c = {k: v[s] for k, v in t.cols.items()}
        c.update({k: v[j] for k, v in t.comm.items()})
        strat = t.strategies
        rc_rank = _rank([x[0] for x in strat])
        mod_rank = _rank([x[3] for x in strat])
        plc_rank = _rank(t.placements)
        cpc_rank, disp_rank = _rank(list(CP_COMM)), _rank(list(EP_DISPATCH))
        return [c["tp"], c["pp"], c["vpp"], c["cp"], c["ep"], c["etp"], c["mbs"], c["zero"],
                rc_rank[c["strat"]], np.array([x[1] for x in strat])[c["strat"]],
                np.array([x[2] for x in strat])[c["strat"]], c["sp"], c["dpo"], np.asarray(t.buckets)[c["bucket"]],
                c["tpo"], cpc_rank[c["cpc"]], c["epo"], disp_rank[c["disp"]], plc_rank[c["plc"]],
                mod_rank[c["strat"]]]

    def lower_rows(self, rows: np.ndarray) -> np.ndarray:
        """Lower bound of every plan of each row from its dominant variants (search.exact); -inf (price them)
        where a row has few variants beyond its dominant ones, so that bounding costs about what pricing does."""
        if not len(rows):
            return np.zeros(0)
        if self.t.variants(rows).sum() < 3 * self.exact.dominant_count(rows).sum():
            return np.full(len(rows), -np.inf)
        try:
            return self.exact.lower_rows(self.prices(rows), np.arange(len(rows)))
        except NarrowpathError:
            return np.full(len(rows), -np.inf)  # price them, and find the failures there

    def twin_rows(self) -> np.ndarray:
        """Per structural row with selective recompute, the row that differs only in a lighter recompute (else −1):
        the strategy that recomputes the largest proper subset of its modules (none recomputes the empty set;
        search.table.twin_strategies). Rows of a block run in (mbs, vpp, zero, strategy) order, so a row's twin is
        in its run."""
        if getattr(self, "_twins", None) is None:
            t = self.t
            c = t.cols
            S = t.num_structural
            change = np.ones(S, dtype=bool)
            if S:
                change[1:] = ((np.diff(c["block"]) != 0) | (np.diff(c["mbs"]) != 0) | (np.diff(c["vpp"]) != 0)
                              | (np.diff(c["zero"]) != 0))
            run = np.cumsum(change) - 1
            NS = len(t.strategies)
            want = np.array(twin_strategies(t.strategies, self.space.base.activation_cache) or [-1])
            code = run.astype(np.int64) * NS + c["strat"]
            order = np.argsort(code, kind="stable")
            w = want[c["strat"]]
            target = run.astype(np.int64) * NS + np.maximum(w, 0)
            pos = np.clip(np.searchsorted(code[order], target), 0, max(0, S - 1))
            hit = (w >= 0) & (code[order][pos] == target) if S else np.zeros(0, dtype=bool)
            self._twins = np.where(hit, order[pos], -1)
        return self._twins

    def twin_of(self, idx: np.ndarray) -> np.ndarray:
        """For plans with selective recompute, the plan that differs only in its twin's lighter recompute (−1
        otherwise: twin_rows)."""
        s = self.row_of(idx)
        tr = self.twin_rows()[s]
        return np.where(tr >= 0, self.t.starts[np.maximum(tr, 0)] + (idx - self.t.starts[s]), -1)

    def equivalent_rows(self) -> np.ndarray:
        """Rows with selective recompute whose plans price exactly as their twins' (every part the same: selective
        recompute of a module a layer does not have, e.g. `layernorm` where Transformer Engine fuses every norm into
        its projection; with DeepSeek-V3's FP8 activation cache, recomputing the MoE activation is what recompute
        none does). Decided on the parts, not the numbers (the structural pass must
        have run)."""
        tw = self.twin_rows()
        out = np.zeros(tw.size, dtype=bool)
        sel = np.flatnonzero(tw >= 0)
        if not sel.size:
            return out
        # a twin has the same layers recomputed and offloaded (the same shares, so the same recompute and offload
        # fractions, saved bytes and temporaries): the same ops, activations and ends make the same compute and
        # memory (the structural pass's `parts_id`)
        same = self.parts_id[sel] == self.parts_id[tw[sel]]
        # the transfers too, on the row's first variant, once per knob setting they read
        c = self.t.cols
        cand = sel[same]
        if cand.size:
            from narrowpath.search.bulk import unique_rows
            first, inv = unique_rows(*(c[k][cand] for k in ("tp", "cp", "mbs", "sp", "ep", "etp", "block", "strat")),
                                     c["strat"][tw[cand]])
            ok = np.array([self._comm_signature(int(self.t.starts[cand[f]])) ==
                           self._comm_signature(int(self.t.starts[tw[cand[f]]])) for f in first])
            same[np.flatnonzero(same)] = ok[inv]
        out[sel] = same
        return out

    def _comm_signature(self, i: int) -> tuple:
        from narrowpath.workload import build as B
        scn = self.parts.scenario(self.t.fields(i))
        return tuple(tuple(B.layer_comm(scn, self.parts.kernel, kind[0])) for kind in self.parts.kinds)

    def candidates(self, idx: np.ndarray, times: np.ndarray, mems: np.ndarray) -> list[Candidate]:
        """Candidates of plans from bulk numbers."""
        wl_flop, tokens, peak, n = self._flop_per_step()
        return [Candidate(plan, t, wl_flop / (t * n * peak), tokens / t, m, self.cap, None)
                for plan, t, m in zip(self.t.plans_unchecked(idx), np.asarray(times, dtype=float).tolist(),
                                      np.asarray(mems, dtype=float).tolist())]

    def _flop_per_step(self):
        from narrowpath.workload.counts import model_flop_per_token
        model, plan = self.space.model, self.space.base
        tokens = self.space.gbs * model.seq_len
        return (model_flop_per_token(model) * tokens, float(tokens),
                self.space.system.device.matrix_peak(plan.precision), self.space.num_gpus)

    def exact_candidates(self, idx: np.ndarray, energy: bool) -> list[Candidate | None]:
        """Candidates of plans priced with predict (None where predict fails)."""
        plans = [(int(i), self.t.plan(int(i))) for i in idx]
        got = price_all(1, self.base, self.space, plans, self.cal_arg, -np.inf, energy, Progress(len(plans), None))
        self.failures += got.failures
        by = dict(got.candidates)
        return [by.get(int(i)) for i in idx]

    def energy_bound(self, rows: np.ndarray, times: np.ndarray) -> np.ndarray:
        """Lower bound of the ledger energy per step of plans of `rows` with step times `times`: idle power of every
        GPU for the step plus the executed FLOPs at the cheapest pJ/FLOP of the formats the plans can execute (the
        ledger also charges bytes moved, ≥ 0). A plan runs no FLOP in a format narrower than its precision (FP8
        plans keep attention in BF16; BF16 plans run nothing in FP8), so the formats at least as wide bound it —
        with the device's own scaling, as the ledger prices them (`pj_per_flop(.., device)`: B200's NVFP4 at half
        FP8's). Until the fifty-sixth session every format counted, and one the device does not rate (NVFP4 on
        H100) made the bound idle power alone: a BF16 search of Llama-3 8B on 8 H100 by energy priced 146,072 of
        233,959 plans in full (298 s against 0.56 s by time)."""
        dev = self.space.system.device
        width = element_bytes(self.space.base.precision, 0)
        coeffs = [pj_per_flop(dev.energy_pj_per_flop, d, dev) for d in PRECISIONS + ("tf32",)
                  if element_bytes(d) >= width]
        cmin = min(coeffs) if coeffs and all(c is not None for c in coeffs) else 0.0
        # under a power cap the ledger's energy per FLOP follows the clock (analysis.energy): so must its bound
        cmin *= clock_fraction(dev.tdp_w, dev.idle_w, self.space.system.power_limit_w)
        return dev.idle_w * self.space.num_gpus * times + self.hw_flop[rows] * cmin * 1e-12


def _rank(values: list) -> np.ndarray:
    order = sorted(range(len(values)), key=lambda i: values[i])
    out = np.zeros(len(values), dtype=np.int64)
    rank, prev = -1, object()
    for i in order:
        if values[i] != prev:
            rank += 1
            prev = values[i]
        out[i] = rank
    return out


def _concat(parts: list[StructuralPrices]) -> StructuralPrices:
    if len(parts) == 1:
        return parts[0]
    kw = {}
    for f in StructuralPrices.__slots__:
        vals = [getattr(p, f) for p in parts]
        kw[f] = None if any(v is None for v in vals) else np.concatenate(vals)
    return StructuralPrices(**kw)


def kth_distinct(times: np.ndarray, k: int) -> float:
    """The k-th smallest distinct value (inf when there are fewer)."""
    if times.size == 0:
        return np.inf
    u = np.unique(times)
    return float(u[k - 1]) if u.size >= k else np.inf


