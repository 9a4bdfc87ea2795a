"""Price many plans at once as numpy arrays: memory, a lower bound of the step time, and the step time itself.

The parts a plan is made of (search.parts: a layer's ops and transfers, the embedding, the collectives of a
placement) come from the functions `predict` calls; this module composes them the way `schedule.step.predict` and
`cost.memory.stage_memory` do, for arrays of plans instead of one. Sums are taken per part rather than per op, so a
number may differ from predict's in the last bits (tests/search/test_bulk.py holds them within 1e-12 relative);
the search re-prices what it shows with predict itself.

Stages that hold the same layers and the same ends (first/last) are one *class* (a 16-stage pipeline has at most a
few): a class is priced once and counted as often as it occurs. Memory is evaluated at a class's first stage, which
holds the most micro-batches in flight; `stage_memory` sizes some temporaries by the largest layer kind a stage
holds, which its layer counts give.

Lower bound (`StructuralPrices.bound_s`, used to prune): every stage's per-micro-batch time is its compute (with
host waits) plus exposed communication and the slowdown of hidden communication, both ≥ 0, so T_i ≥ C_i; the
pipeline time m·max T + (p − 1)·mean T / v only grows with each T_i; the rest of the step (gradient sync, tied
embedding, optimizer) is ≥ 0. Hence step ≥ m·max C + (p − 1)·mean C / v.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from narrowpath.cost.memory import RUNTIME_RESERVE_BYTES, chunk_held_counts
from narrowpath.search.parts import AGG, Parts
from narrowpath.search.pipeline_bulk import fill_bound
from narrowpath.search.space import recomputed_modules
from narrowpath.search.table import PlanTable
from narrowpath.spec.plan import zero3_kept_gathered
from narrowpath.workload.build import (embedding_table_params, grad_bytes_per_param, held_weight_bytes_per_param,
                                       optimizer_state_bytes_per_param, sharded_weight_bytes_per_param,
                                       weight_bytes_per_param)
from narrowpath.workload.split import offload_fraction, stack_layout, stage_layer_ranges
from narrowpath.workload.loss import loss_temporary_bytes
from narrowpath.workload.precision import act_bytes

_RC = {"none": 0, "selective": 1, "full": 2}


def recompute_codes(strategies, activation_cache: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per activation strategy: (mode: _RC, code of the mode and module set, code of the selective module set).
    The second tells apart what changes a layer's ops, transfers and recompute work (the mode and, under selective,
    the set of modules; not the shares of layers recomputed or offloaded, which scale the parts afterwards); the
    third what changes the bytes a layer keeps when it is not fully recomputed (0 for none and full, whose parts
    price the layer without recompute)."""
    mode = np.array([_RC[s[0]] for s in strategies], dtype=np.int8)
    keys: dict = {}
    code = np.array([keys.setdefault((s[0], recomputed_modules(s, activation_cache)), len(keys))
                     for s in strategies], dtype=np.int16)
    return mode, code, np.where(mode == 1, code + 1, 0).astype(np.int16)


def unique_rows(*cols: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(position of the first row of each distinct combination, inverse index) of integer columns.

    The combinations come out in lexicographic order of their values, each at its first row: every column is coded
    by an order-preserving integer code and the codes are combined in mixed radix. The codes are each column's
    offset from its least value when the radices' product fits (`_offset_key`: no sort per column), else its rank
    among its distinct values; both give the same order and so the same result."""
    key = _offset_key(cols)
    if key is not None:
        _, first, inv = np.unique(key, return_index=True, return_inverse=True)
        return first, inv.reshape(-1)
    return _ranked_unique_rows(*cols)


def _offset_key(cols) -> np.ndarray | None:
    """Mixed-radix key of integer columns coded by their offset from their least value, or None (not integer
    columns, none at all, no rows, or radices whose product may exceed 2**62)."""
    arrs = [np.asarray(c) for c in cols]
    if not arrs or not arrs[0].size or any(a.dtype.kind not in "bi" for a in arrs):
        return None
    m = np.array(arrs, dtype=np.int64)
    lo, hi = m.min(axis=1), m.max(axis=1)
    spans = [int(h) - int(l) + 1 for l, h in zip(lo.tolist(), hi.tolist())]
    radix = 1
    for s in spans:
        radix *= s
    if radix > 2 ** 62:
        return None
    weights, w = [], 1
    for s in reversed(spans):
        weights.append(w)
        w *= s
    return (m - lo[:, None]).T @ np.array(weights[::-1], dtype=np.int64)


def _ranked_unique_rows(*cols: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """unique_rows with every column coded by its rank among its distinct values."""
    n = len(cols[0])
    key = np.zeros(n, dtype=np.int64)
    radix = 1
    for c in cols:
        u, codes = np.unique(np.asarray(c), return_inverse=True)
        radix *= max(1, u.size)
        if radix > 2 ** 62:
            stacked = np.stack([np.asarray(x, dtype=np.float64) for x in cols], axis=1)
            _, first, inv = np.unique(stacked, axis=0, return_index=True, return_inverse=True)
            return first, inv.reshape(-1)
        key = key * max(1, u.size) + codes
    _, first, inv = np.unique(key, return_index=True, return_inverse=True)
    return first, inv.reshape(-1)


def _unique_float_rows(*cols: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    stacked = np.stack([np.asarray(x, dtype=np.float64) for x in cols], axis=1)
    _, first, inv = np.unique(stacked, axis=0, return_index=True, return_inverse=True)
    return first, inv.reshape(-1)


@dataclass(frozen=True, slots=True)
class Shape:
    """Stage classes of one (pp, vpp) pipeline: arrays over classes q."""

    counts: np.ndarray
    """(Q, K) layers of each kind per stage."""
    first: np.ndarray
    last: np.ndarray
    mult: np.ndarray
    """Stages in the class."""
    minidx: np.ndarray
    """Index of the class's first stage."""
    layers: np.ndarray
    chunks: np.ndarray
    """(Q, v) layers of each interleaved chunk."""
    stage_class: np.ndarray
    """(p,) class of every stage."""
    chunk_counts: np.ndarray
    """(Q, v, K) layers of each kind per interleaved chunk."""
    prefix: np.ndarray
    """(Q, v, L + 1, K) layers of each kind among a chunk's first j: the ones a block recompute of j re-runs."""


def pipeline_shape(layers: int, kind_of: list, kinds: list, pp: int, vpp: int, chunk_layers: tuple = ()) -> Shape:
    ranges = stage_layer_ranges(layers, pp, vpp, chunk_layers=chunk_layers)
    K = len(kinds)
    classes: dict[tuple, list] = {}
    stage_class = []
    for i, rng in enumerate(ranges):
        per_chunk = np.zeros((len(rng), K))
        for j, r in enumerate(rng):
            for li in r:
                per_chunk[j, kinds.index(kind_of[li])] += 1
        counts = per_chunk.sum(axis=0)
        order = tuple(tuple(kinds.index(kind_of[li]) for li in r) for r in rng)  # (which layers a chunk re-runs first)
        key = (tuple(counts), i == 0, i == pp - 1, tuple(len(r) for r in rng), tuple(per_chunk.reshape(-1)), order)
        if key not in classes:
            classes[key] = [i, 0, len(classes)]
        classes[key][1] += 1
        stage_class.append(classes[key][2])
    keys = list(classes)
    L = max((len(r) for rng in ranges for r in rng), default=0)
    prefix = np.zeros((len(keys), vpp, L + 1, K))
    for q, k in enumerate(keys):
        for j, seq in enumerate(k[5]):
            for n, kind in enumerate(seq):
                prefix[q, j, n + 1:, kind] += 1
    return Shape(counts=np.array([k[0] for k in keys]).reshape(len(keys), K), first=np.array([k[1] for k in keys]),
                 last=np.array([k[2] for k in keys]), mult=np.array([classes[k][1] for k in keys], dtype=float),
                 minidx=np.array([classes[k][0] for k in keys]),
                 layers=np.array([sum(k[0]) for k in keys], dtype=float),
                 chunks=np.array([k[3] for k in keys], dtype=float).reshape(len(keys), vpp),
                 stage_class=np.array(stage_class, dtype=np.int64),
                 chunk_counts=np.array([k[4] for k in keys], dtype=float).reshape(len(keys), vpp, K), prefix=prefix)


@dataclass(slots=True)
class StructuralPrices:
    """What every plan of a structural row shares, for rows `rows`: arrays over (row) or (row, class)."""

    rows: np.ndarray
    memory_bytes: np.ndarray
    bound_s: np.ndarray
    """Lower bound of the step time (module docstring)."""
    compute: np.ndarray
    """(R, Q, 3) per-micro-batch compute incl. host waits per phase (fwd, bwd, recompute) of each class."""
    gemm: np.ndarray
    attn: np.ndarray
    counts: np.ndarray
    mult: np.ndarray
    minidx: np.ndarray
    first: np.ndarray
    last: np.ndarray
    valid: np.ndarray
    rerun: np.ndarray
    """(R, Q, V, K) layers of each kind each chunk's recompute-phase items run in (workload.split.rerun_kind_counts:
    a block recompute's first recompute_layers of the chunk; every layer otherwise)."""
    f_end: np.ndarray
    """(R, Q) share of an end's recompute-phase items that runs (workload.split.end_rerun_share: the MTP modules'
    none under a block recompute of some layers)."""
    saved: np.ndarray
    """(R, Q) activation bytes a class's layers keep without recompute (what offloading moves, before f_off)."""
    f_off: np.ndarray
    params_top: np.ndarray
    expert_top: np.ndarray
    top_class: np.ndarray
    """Class of the stage with the most parameters (the one whose optimizer update the step waits for)."""
    params_cls: np.ndarray
    expert_cls: np.ndarray
    """(R, Q) parameters (of them in routed experts) of a rank of each class (a 1F1B stage syncs its own)."""
    kind_cost: np.ndarray
    """(R, K, 3) per phase (fwd, bwd, recompute) time of one layer of each kind's ops: the slower of the GPU's and
    the host's pace, with its host synchronisations (schedule.chunks.pass_cost)."""
    end_cost: np.ndarray
    """(R, Q, 3) the same of each class's embedding or output end (schedule.chunks: the chunk it sits in)."""
    layer_params: np.ndarray
    """(R, K) parameters of one layer of each kind on one rank."""
    end_params: np.ndarray
    """(R, Q) parameters of each class's end (embedding, output layer, multi-token prediction)."""
    shape: np.ndarray
    """(R,) index of the row's pipeline shape in `Bulk.shapes`."""
    hw_flop: np.ndarray
    """Executed FLOPs per step over the whole job (predict's hardware_flop_per_step)."""
    parts_id: np.ndarray | None = None
    """(R,) id of the parts a row's activation strategy changes (each layer kind's ops and kept activations, the
    ends' ops, the MTP modules' activations): two rows that differ only in a strategy of the same recomputed and
    offloaded layers compute and hold the same when their ids are equal (search.engine.Engine.equivalent_rows)."""
    optimizer_s: np.ndarray | None = None

    def take(self, at: np.ndarray) -> "StructuralPrices":
        """The prices of rows `at` (positions in this object)."""
        kw = {f: (getattr(self, f)[at] if getattr(self, f) is not None else None) for f in self.__slots__}
        return StructuralPrices(**kw)

    def __len__(self) -> int:
        return int(self.rows.size)


def _pace(agg: np.ndarray, host_sync_s: float) -> np.ndarray:
    """(..., 3) per phase: the slower of the GPU's (AGG comp) and the host's (host) pace, with the host
    synchronisations (syncs), of (..., 3, AGG) op sums (schedule.chunks.pass_cost)."""
    return np.maximum(agg[..., 0], agg[..., 1]) + agg[..., 2] * host_sync_s


class Bulk:
    """Array pricing of the plans of one table."""

    def __init__(self, table: PlanTable, parts: Parts):
        self.t, self.p = table, parts
        space = table.space
        self.model, self.system = space.model, space.system
        cols = table.cols
        self.cols = cols
        mode, code, sel = recompute_codes(table.strategies, space.base.activation_cache)
        self.rc = mode[cols["strat"]]
        """Recompute mode of every structural row (_RC: 0 none, 1 selective, 2 full)."""
        self.rck = code[cols["strat"]]
        """Code of every row's recompute mode and module set: what parts keyed by the recompute read."""
        self.sel = sel[cols["strat"]]
        """Code of every row's selective module set (0 without selective recompute): what activations read."""
        self.m = (space.gbs // (cols["dp"].astype(np.int64) * cols["mbs"])).astype(np.int64)
        self.disp = (table.comm["disp"][table.comm_start[cols["block"]]] if len(cols["block"]) else
                     np.zeros(0, dtype=np.int8))
        """MoE dispatch of every structural row (its block's: search.table), which its permutations read."""
        kept = zero3_kept_gathered(space.base.zero3_reshard, cols["pp"])
        self.zero = np.where((cols["zero"] == 3) & kept, 1, cols["zero"]).astype(np.int64)
        """ZeRO stage whose traffic and memory every structural row prices (Plan.comm_zero_stage: ZeRO-3 kept
        gathered through the step, plan.zero3_reshard, is ZeRO-1's one gather and one reduce-scatter per step and
        ZeRO-1's memory); `cols["zero"]` stays the plan's knob."""
        kinds = parts.kinds
        self.K = len(kinds)
        kind_of = [(self.model.is_moe_layer(li), self.model.is_window_layer(li)) for li in range(self.model.layers)]
        first, inv = unique_rows(cols["pp"], cols["vpp"])
        self.shape_of = inv
        self.shapes = [pipeline_shape(self.model.layers, kind_of, kinds, pp, vpp,  # the stack's, as predict's
                                      stack_layout(self.model, space.base.framework, pp, vpp))
                       for pp, vpp in ((int(cols["pp"][i]), int(cols["vpp"][i])) for i in first)]
        self.Q = max(len(s.mult) for s in self.shapes) if self.shapes else 1
        self.low = space.base.low_precision
        self.cal = parts.cal
        self._coded_rows: np.ndarray | None = None
        self._codes: dict = {}
        self._sigs: dict = {}
        self._prefix_table: np.ndarray | None = None

    # ---- helpers ----------------------------------------------------------------------------------------------------
    def _fields(self, r: int) -> dict:
        """Fields of structural row r's first plan (a representative)."""
        return self.t.fields_at(r, int(self.t.comm_start[self.t.cols["block"][r]]))

    def _per_unique(self, rows: np.ndarray, keycols: tuple, fn) -> np.ndarray:
        """fn(key tuple, representative fields) for each distinct key among `rows`, spread back over the rows.
        Named columns are coded once per `rows` (the structural pass asks for the same few many times)."""
        if self._coded_rows is not rows:
            self._coded_rows, self._codes = rows, {}
        coded = []
        for c in keycols:
            if isinstance(c, str):
                if c not in self._codes:
                    u, inv = np.unique(self.cols[c][rows], return_inverse=True)
                    self._codes[c] = (u, inv.reshape(-1))
                coded.append(self._codes[c])
            else:
                u, inv = np.unique(c, return_inverse=True)
                coded.append((u, inv.reshape(-1)))
        key = np.zeros(len(rows), dtype=np.int64)
        for u, inv in coded:
            key = key * max(1, u.size) + inv
        _, first, inv = np.unique(key, return_index=True, return_inverse=True)
        vals = [fn(tuple(int(u[code[i]]) for u, code in coded), lambda r=int(rows[i]): self._fields(r))
                for i in first]
        return np.asarray(vals)[inv.reshape(-1)]

    def _shape_arrays(self, rows: np.ndarray) -> dict[str, np.ndarray]:
        Q, K = self.Q, self.K
        g = self.shape_of[rows]
        out = {"counts": np.zeros((len(self.shapes), Q, K)), "first": np.zeros((len(self.shapes), Q), dtype=bool),
               "last": np.zeros((len(self.shapes), Q), dtype=bool), "mult": np.zeros((len(self.shapes), Q)),
               "minidx": np.zeros((len(self.shapes), Q), dtype=np.int64), "layers": np.zeros((len(self.shapes), Q)),
               "chunks": np.zeros((len(self.shapes), Q, max((sh.chunks.shape[1] for sh in self.shapes), default=1)))}
        out["chunk_counts"] = np.zeros((len(self.shapes), Q, out["chunks"].shape[2], K))
        for j, sh in enumerate(self.shapes):
            q, v = len(sh.mult), sh.chunks.shape[1]
            for k in out:
                if k in ("chunks", "chunk_counts"):  # padded with empty chunks, which no share counts
                    out[k][j, :q, :v] = getattr(sh, k)
                else:
                    out[k][j, :q] = getattr(sh, k)
        return {k: v[g] for k, v in out.items()} | {"shape": g}

    def _prefix(self) -> np.ndarray:
        """(S, Q, V, L, K) every shape's Shape.prefix, padded (past a chunk's end its counts stay the whole chunk's);
        built once and indexed per row, never spread over the rows (L is the longest chunk: 97 for GPT-3 on pp 1)."""
        if self._prefix_table is None:
            V = max((sh.chunks.shape[1] for sh in self.shapes), default=1)
            L = max((sh.prefix.shape[2] for sh in self.shapes), default=1)
            out = np.zeros((len(self.shapes), self.Q, V, L, self.K))
            for j, sh in enumerate(self.shapes):
                q, v, n = len(sh.mult), sh.chunks.shape[1], sh.prefix.shape[2]
                out[j, :q, :v, :n] = sh.prefix
                out[j, :q, :v, n:] = sh.prefix[:, :, -1:]
            self._prefix_table = out
        return self._prefix_table

    def _prefix_at(self, sh, upto: np.ndarray) -> np.ndarray:
        """(R, Q, V, K) layers of each kind among each chunk's first `upto` (R, Q, V) of the rows' shapes `sh`."""
        _, Q, V = upto.shape
        return self._prefix()[sh["shape"][:, None, None], np.arange(Q)[None, :, None], np.arange(V)[None, None, :],
                              upto]

    # ---- structural rows: memory, compute, bound ----------------------------------------------------------------------
    def structural(self, rows: np.ndarray) -> StructuralPrices:
        P, c = self.p, self.cols
        rows = np.asarray(rows, dtype=np.int64)
        R, Q, K = len(rows), self.Q, self.K
        sh = self._shape_arrays(rows)
        valid = sh["mult"] > 0
        rck, rcs = self.rck[rows], self.sel[rows]
        tp, cp, mbs, sp = (c[k][rows] for k in ("tp", "cp", "mbs", "sp"))
        ep, etp, pp = (c[k][rows] for k in ("ep", "etp", "pp"))
        zero = self.zero[rows]
        z3q = (zero == 3) & self.low
        # per-micro-batch ops of each class: layer kinds by count, then the embedding ends
        ops_key = ("tp", "cp", "mbs", "sp", rck, z3q.astype(np.int8), "ep", "etp")
        NA = len(AGG)
        acc = np.zeros((R, Q, 3, NA))
        LA = np.zeros((R, K))
        LP = np.zeros((R, K))
        LE = np.zeros((R, K))
        SV = np.zeros((R, K))
        zeros = np.zeros(R, dtype=np.int8)
        sig: list[np.ndarray] = []  # what the recompute changes: ops and activations of each kind, the ends' ops
        rerun, f_end = self._rerun(rows, sh)
        rc_counts = rerun.sum(axis=2)  # (R, Q, K)
        for k, kind in enumerate(P.kinds):
            # a dense layer reads neither ep nor etp: leave them out of its keys (more plans share its parts)
            ex = ("ep", "etp") if kind[0] and self.model.moe is not None else (zeros, zeros)
            disp = self.disp[rows] if kind[0] and self.model.moe is not None else zeros  # its permutations
            ids = self._per_unique(rows, ops_key[:6] + ex + (disp,),
                                   lambda key, f, kind=kind: P.layer_ops_id(key, f, kind))
            sig.append(ids)
            a = np.asarray(P.agg)[ids][:, None]  # (R, 1, 3, NA): the recompute phase in the layers it re-runs
            acc[:, :, :2] += sh["counts"][:, :, k, None, None] * a[:, :, :2]
            acc[:, :, 2] += rc_counts[:, :, k, None] * a[:, :, 2]
            LA[:, k] = self._per_unique(rows, ("tp", "cp", "mbs", "sp", rcs) + ex,
                                        lambda key, f, kind=kind: P.activations(key, f, kind))
            pe = self._per_unique(rows, ("tp",) + ex,
                                  lambda key, f, kind=kind: P.layer_params(key, f, kind[0]))
            LP[:, k], LE[:, k] = pe[:, 0], pe[:, 1]
            SV[:, k] = self._per_unique(rows, ("tp", "cp", "mbs", "sp") + ex,
                                        lambda key, f, kind=kind: P.saved_bytes(key, f, kind))
        # the ends read ep, etp and the recompute (mode and modules) only through the multi-token-prediction modules
        mtp = self.model.mtp_layers > 0
        emb_key = ("tp", "cp", "mbs", "sp") + ((rck, "ep", "etp", self.disp[rows]) if mtp else (zeros,) * 4)
        par_key = ("tp",) + (("ep", "etp") if mtp else (zeros, zeros)) + ((pp == 1).astype(np.int8),)
        emb_ops = np.zeros((R, Q, 3, NA))
        emb_par = np.zeros((R, Q, 2))
        for fl in ((True, True), (True, False), (False, True), (False, False)):
            sel = (sh["first"] == fl[0]) & (sh["last"] == fl[1]) & valid
            has = sel.any(axis=1)
            ids = np.full(R, -1, dtype=np.int64)
            sig.append(ids)
            if not has.any():
                continue
            sub = np.flatnonzero(has)
            ids[sub] = self._per_unique(rows[sub], tuple(k if isinstance(k, str) else k[sub] for k in emb_key),
                                        lambda key, f, fl=fl: P.embedding_ops_id(key, f, *fl))
            agg = np.asarray(P.agg)
            emb_ops[sel] = np.broadcast_to(agg[ids][:, None], (R, Q) + agg.shape[1:])[sel]
            pe = np.zeros((R, 2))
            pe[sub] = self._per_unique(rows[sub], tuple(k if isinstance(k, str) else k[sub] for k in par_key),
                                       lambda key, f, fl=fl: P.embedding_params(key, f, *fl))
            emb_par[sel] = np.broadcast_to(pe[:, None, :], (R, Q, 2))[sel]
        acc[:, :, :2] += emb_ops[:, :, :2]
        acc[:, :, 2] += f_end[..., None] * emb_ops[:, :, 2]
        hs = self.cal.host_sync_s
        kind_cost = np.stack([_pace(np.asarray(P.agg)[ids], hs) for ids in sig[:self.K]], axis=1) if self.K else \
            np.zeros((R, 0, 3))
        end_cost = _pace(emb_ops, hs)
        f_off = self._per_class(rows, sh, lambda pl, n: offload_fraction(pl, n))
        comp, host, syncs = acc[..., 0], acc[..., 1], acc[..., 2]
        waited = np.maximum(0.0, host - comp) + syncs * self.cal.host_sync_s
        compute = comp + waited
        # the bound: every stage at least its compute
        ctot = compute.sum(axis=2)
        m = self.m[rows].astype(float)
        # every pipeline schedule keeps its busiest stage busy for all of that stage's work (schedule.pipeline);
        # with one chunk per stage the first micro-batch's way in and the last one's way out add to it
        bound = m * np.where(valid, ctot, -np.inf).max(axis=1)
        shape = self.shape_of[rows]
        for g in np.unique(shape):
            shp = self.shapes[int(g)]
            if shp.chunks.shape[1] == 1 and shp.stage_class.size > 1:
                at = np.flatnonzero(shape == g)
                sc = shp.stage_class
                bound[at] = np.maximum(bound[at], fill_bound(ctot[at][:, sc], compute[at][:, sc, 0], m[at]))
        # parameters per class, the most loaded stage (first of the largest)
        params = np.zeros((R, Q))
        expert = np.zeros((R, Q))
        for k, kind in enumerate(P.kinds):
            params += sh["counts"][:, :, k] * LP[:, None, k]
            if kind[0]:
                expert += sh["counts"][:, :, k] * LE[:, None, k]
        params += emb_par[..., 0]
        expert += emb_par[..., 1]
        top = _first_max(np.where(valid, params, -np.inf), sh["minidx"])
        idx = np.arange(R)
        mtp_acts = self._per_unique(rows, ("tp", "cp", "mbs", "sp", rcs, "ep", "etp"),
                                    lambda key, f: P.mtp_activations(key, f)) if mtp else np.zeros(R)
        mem = self._memory(rows, sh, valid, params, expert, LA, mtp_acts, f_off)
        saved = (sh["counts"] * SV[:, None, :]).sum(axis=2)
        ranks = (tp * cp * c["dp"][rows]).astype(float)
        hw_flop = (np.where(valid, acc[..., 5].sum(axis=2), 0.0) * sh["mult"]).sum(axis=1) * m * ranks
        return StructuralPrices(rows, mem, bound, compute, acc[..., 3], acc[..., 4], sh["counts"], sh["mult"],
                                sh["minidx"], sh["first"], sh["last"], valid, rerun, f_end, saved, f_off,
                                params[idx, top], expert[idx, top], top, params, expert, kind_cost=kind_cost,
                                end_cost=end_cost,
                                layer_params=LP, end_params=emb_par[..., 0],
                                shape=self.shape_of[rows], hw_flop=hw_flop,
                                parts_id=self._intern(np.column_stack(sig + [LA, mtp_acts])))

    def _rerun(self, rows, sh) -> tuple[np.ndarray, np.ndarray]:
        """(R, Q, V, K) layers of each kind each chunk's recompute-phase items run in and (R, Q) the share of the
        ends' that runs (workload.split.rerun_kind_counts, end_rerun_share: a full recompute of recompute_layers
        re-runs each chunk's first ones and not the MTP modules; every layer and the modules otherwise)."""
        rcl = np.array([st[1] for st in self.t.strategies], dtype=np.int64)[self.cols["strat"][rows]]
        n_c = sh["chunks"].astype(np.int64)
        block = ((self.rc[rows] == 2) & (rcl > 0))[:, None, None]
        rr = np.where(block, np.minimum(n_c, rcl[:, None, None]), n_c)
        f_end = np.broadcast_to(np.where(block[:, 0, 0], 0.0, 1.0)[:, None], (rows.size, n_c.shape[1]))
        return self._prefix_at(sh, rr), f_end

    def _per_class(self, rows, sh, fn) -> np.ndarray:
        """fn(stand-in plan, the class's chunk layer counts) per (row, class), once per distinct (strategy, vpp,
        chunks)."""
        strat = self.cols["strat"][rows]
        vpp = self.cols["vpp"][rows]
        R, Q = sh["layers"].shape
        s2, v2 = np.repeat(strat, Q), np.repeat(vpp, Q)
        ch = sh["chunks"].reshape(R * Q, -1).astype(np.int64)
        first, inv = unique_rows(s2, v2, *ch.T)
        vals = []
        for i in first:
            rc, rcl, off, _ = self.t.strategies[int(s2[i])]
            pl = _StandIn(recompute=rc, recompute_layers=rcl, offload_layers=off, vpp=int(v2[i]))
            vals.append(fn(pl, tuple(int(n) for n in ch[i, :int(v2[i])])))
        return np.asarray(vals, dtype=float)[inv].reshape(R, Q)

    def _intern(self, sig: np.ndarray) -> np.ndarray:
        """An id per row of `sig` (rows, columns): equal rows, in this or any earlier call, get the same id."""
        u, inv = np.unique(sig, axis=0, return_inverse=True)
        ids = np.array([self._sigs.setdefault(tuple(r), len(self._sigs)) for r in u.tolist()], dtype=np.int64)
        return ids[inv.reshape(-1)]

    def _memory(self, rows, sh, valid, params, expert, LA, mtp_acts, f_off) -> np.ndarray:
        """Memory per rank of the most loaded stage (cost.memory.stage_memory, evaluated per class at its first
        stage)."""
        c, P, model, base = self.cols, self.p, self.model, self.t.space.base
        R, Q = params.shape
        tp, cp, dp, mbs, sp, ep = (c[k][rows].astype(np.int64) for k in ("tp", "cp", "dp", "mbs", "sp", "ep"))
        zero = self.zero[rows]
        etp = c["etp"][rows].astype(np.int64)
        expert_tp = np.where(etp > 0, etp, tp)
        shards = (dp * cp).astype(float)[:, None]
        eshards = np.maximum(1, tp * cp * dp // (expert_tp * ep)).astype(float)[:, None]
        z = zero[:, None]
        dense = params - expert
        sharded = dense / shards + expert / eshards
        Wg, G = sharded_weight_bytes_per_param(base), grad_bytes_per_param(base)
        A = act_bytes(base)
        # per chunk (cost.memory.stage_memory): a full recompute's first recompute_layers layers of every chunk keep
        # their inputs, the others what they keep; the MTP layers sit in the last chunk; an offloaded share is in host
        rcl, off = (np.array([st[i] for st in self.t.strategies], dtype=np.int64)[c["strat"][rows]] for i in (1, 2))
        n_c = sh["chunks"]
        full = (self.rc[rows] == 2)[:, None, None]
        k_rc = rcl[:, None, None]
        rerun = np.where(full, np.minimum(n_c, np.where(k_rc > 0, k_rc, n_c)), 0).astype(np.int64)
        k_off = off[:, None, None]
        gone = np.minimum(n_c, k_off).astype(np.int64)  # the first offload_layers layers: in host memory
        pre = self._prefix_at(sh, np.maximum(rerun, gone))
        inp = self._per_unique(rows, ("tp", "cp", "mbs", "sp"), lambda key, f: P.layer_input_bytes(key, f))
        kept = ((sh["chunk_counts"] - pre) * LA[:, None, None, :]).sum(axis=3) \
            + np.maximum(0, rerun - gone) * inp[:, None, None]
        if model.mtp_layers:
            at = np.broadcast_to((c["vpp"][rows].astype(np.int64) - 1)[:, None, None], (R, Q, 1))
            n_last = np.take_along_axis(n_c, at, axis=2)[..., 0]
            f = (full[..., 0] & (k_rc[..., 0] == 0)).astype(float)  # split.mtp_recomputed
            o = np.where((k_off[..., 0] > 0) & (n_last > 0), np.minimum(n_last, k_off[..., 0]) / np.maximum(n_last, 1),
                         0.0)
            mtp = ((1 - f) * mtp_acts[:, None] + f * model.mtp_layers * inp[:, None]) * (1 - o)
            grown = np.take_along_axis(kept, at, axis=2) + np.where(sh["last"], mtp, 0.0)[..., None]
            np.put_along_axis(kept, at, grown, axis=2)
        # the embedding and output layer keep 16-bit weights (cost.memory.stage_memory)
        Wb = weight_bytes_per_param(base.precision)
        pp = c["pp"][rows].astype(np.int64)
        emb = np.zeros((R, Q))
        for v in (np.unique(pp) if model.arch == "transformer" else ()):
            at = pp == v
            emb[at] = embedding_table_params(model, tp[at][:, None].astype(float), int(v), sh["first"][at],
                                             sh["last"][at])
        emb_shard = emb / shards
        weights = np.where(z < 3, (params - emb) * held_weight_bytes_per_param(base, self.system.device.fp8_any_layout)
                           + emb * Wb, (sharded - emb_shard) * Wg + emb_shard * Wb)
        grads = np.where(z < 2, params, sharded) * G
        optim = np.where(z < 1, params, sharded) * optimizer_state_bytes_per_param(base)
        seen_max = np.maximum(0.0, np.where(sh["counts"] > 0, LA[:, None, :], -np.inf).max(axis=2))
        temps = np.where(f_off > 0, 2 * seen_max, 0.0)
        temps = np.where(self.rc[rows][:, None] == 2, np.maximum(temps, seen_max), temps)
        s = model.seq_len // cp
        logits = (mbs * s * model.vocab / tp)[:, None]
        temps = np.where(sh["last"], np.maximum(temps, loss_temporary_bytes(base.cross_entropy, logits, A)), temps)
        emb_out = (A * mbs * s * model.hidden / np.where(sp > 0, tp, 1))[:, None]
        kept[:, :, 0] += np.where(sh["first"], emb_out, 0.0)  # held with chunk 0
        acts = self._held_peak(rows, sh, kept)
        temps = np.where(z == 3, temps + 2 * (params / np.maximum(1.0, sh["layers"])) * Wg, temps)
        total = weights + grads + optim + acts + temps + RUNTIME_RESERVE_BYTES
        return np.where(valid, total, -np.inf).max(axis=1)

    def _held_peak(self, rows, sh, kept) -> np.ndarray:
        """(R, Q) the most the forwards a class's first stage holds weigh at once: its per-chunk bytes `kept`
        (R, Q, V) against each moment's chunk counts (cost.memory.chunk_held_counts)."""
        pp, vpp, m = self.cols["pp"][rows], self.cols["vpp"][rows], self.m[rows]
        R, Q = sh["minidx"].shape
        a, b, cc, d = np.repeat(pp, Q), np.repeat(vpp, Q), np.repeat(m, Q), sh["minidx"].reshape(-1)
        first, inv = unique_rows(a, b, cc, d)
        flat = kept.reshape(R * Q, -1)
        out = np.zeros(R * Q)
        for u, i in enumerate(first):
            at = np.flatnonzero(inv == u)
            moments = np.array(chunk_held_counts(int(d[i]), int(a[i]), int(b[i]), int(cc[i])), dtype=float)
            out[at] = (flat[at, :moments.shape[1]] @ moments.T).max(axis=1)
        return out.reshape(R, Q)

    def optimizer(self, sp: StructuralPrices) -> np.ndarray:
        """Optimizer time of each structural row's most loaded rank (once per distinct parameter count)."""
        if sp.optimizer_s is None:
            c, r, P = self.cols, sp.rows, self.p
            keys = [self.zero[r]] + [c[k][r] for k in ("tp", "cp", "dp", "ep", "etp")]
            first, inv = _unique_float_rows(*keys, sp.params_top, sp.expert_top)
            vals = [P.optimizer_s(tuple(int(k[i]) for k in keys), lambda rr=int(r[i]): self._fields(rr),
                                  float(sp.params_top[i]), float(sp.expert_top[i])) for i in first]
            sp.optimizer_s = np.asarray(vals, dtype=float)[inv]
        return sp.optimizer_s


def _first_max(values: np.ndarray, order: np.ndarray) -> np.ndarray:
    """Per row, the column of the largest value; among equal largest values the one with the smallest `order`."""
    best = values.max(axis=1, keepdims=True)
    cand = np.where(values == best, order, np.iinfo(np.int64).max)
    return cand.argmin(axis=1)


class _StandIn:
    """The plan fields `offload_fraction` reads (and the strategy's recompute, for a reader of the same key)."""

    __slots__ = ("recompute", "recompute_layers", "offload_layers", "vpp")

    def __init__(self, **kw):
        for k, v in kw.items():
            setattr(self, k, v)
