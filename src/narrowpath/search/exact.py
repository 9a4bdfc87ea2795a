"""The step time of every plan of some structural rows: all their communication variants at once.

Every structural row (search.table) has its block's list of communication variants (placement, overlap switches,
bucket, cp exchange, expert dispatch); blocks with the same list form a *group*, priced as one grid rows ×
variants: a part keyed by some row knobs and some variant knobs is looked up once per distinct pair of keys, and
the arithmetic runs over (rows, stage classes, variants) arrays.

The overlap of a stage's transfers with its compute has a closed form. `schedule.step.predict` walks the transfers
in order: one that hides behind its phase's matrix work hides min(t, hb) and spends hb; one that hides behind the
attention core hides min(t, ab, hb) and spends both (hb starts at the phase's matrix time, ab at its attention time
× (cp − 1)/cp). Without hb the walk hides X = P + min(A, ab) (P, A: the two kinds' totals; a greedy fill of one
budget hides min(total, budget)); with hb every transfer hides what it would without it until the running total
reaches hb, and nothing after. So the phase hides H = min(hb, P + min(A, ab)) whatever the order, and the stage takes
compute + transfers − (1 − slowdown)·H. Traffic on a share of the micro-batches (ZeRO-2's per-micro-batch
reduce-scatter, S) has a budget of its own the same way, sb = hb·(m − 1)/m: H = min(hb, P + min(A, ab) + min(S, sb)).
This module uses that identity; tests/search hold it against predict.

The stages of a class (search.bulk) differ in one thing: the share f of their passes that run merged with another
micro-batch's (schedule.step.paired_fraction: an earlier stage warms up longer, and its warm-up forwards and
cool-down backwards run alone, hiding nothing). The pass-pair traffic hides f·partner, linear in f, so the partnered
part is summed once per class and every stage's time is composed from it (`Exact._stage_times`).

Dominance gives a tighter lower bound per structural row. Variants that share the placement, the cp exchange and
the expert dispatch differ only in overlap switches and bucket size. Switching an overlap on moves a transfer from
the exposed part into P, so H cannot shrink and no stage gets slower; the pipeline time only grows with the stage
times. The step's data-parallel exposure is at least the bucketed formula's with an unlimited window, which hides all
but a remainder bucket that some bucket size makes as small as any: its slowdown alone (bucket_tail: 0 past the
window). So pricing the class's dominant variant (every switch on) with an unlimited window bounds every variant of
the class from below.
"""
from __future__ import annotations

import functools

import numpy as np

from narrowpath.schedule.chunks import chunk_streams
from narrowpath.schedule.step import host_copy_cost, paired_fraction
from narrowpath.search.bulk import Bulk, StructuralPrices, unique_rows
from narrowpath.search.parts import SUMS, Cells
from narrowpath.search.pipeline_bulk import fill_bound, pipeline_times

_CELLS = 400_000
"""Rows × classes × variants priced at once (bounds the arrays to a few tens of MB)."""
_OUTER = ("tp", "cp", "dp", "pp", "ep", "etp", "sp")


def bucketed_exposed(total_s, message_bytes, bucket_bytes, window_s, slowdown):
    """`schedule.step.exposed_after_bucketed_overlap` over arrays (same formula, element by element)."""
    safe = np.where(bucket_bytes > 0, bucket_bytes, 1.0)
    n_buckets = np.where(bucket_bytes > 0, np.maximum(1.0, message_bytes / safe), 1.0)
    exposed = bucket_tail(total_s, n_buckets, window_s)
    hidden = total_s - exposed
    return exposed + slowdown * hidden


def bucket_tail(total_s, n_buckets, window_s):
    """`schedule.exposure.bucket_tail_s` over arrays (same operations, element by element)."""
    n = np.maximum(1.0, n_buckets)
    last = np.ceil(n)
    with np.errstate(invalid="ignore"):  # an unlimited window: 0 (as there), not inf − inf
        first = window_s / n + total_s
        end = window_s + total_s * (1.0 - (last - 1) / n)
        end = np.where(last >= 2, np.maximum(end, (last - 1) * window_s / n + total_s * (1.0 - (last - 2) / n)),
                       end)
        return np.where(np.isinf(window_s), 0.0, np.maximum(0.0, np.maximum(first, end) - window_s))


def _pass_pair_partnered(P: np.ndarray, L: np.ndarray) -> np.ndarray:
    """schedule.step.pass_pair_hidden_s summed over the phases, for arrays, for a pass merged with another
    micro-batch's: P (..., 3) the pass-pair traffic and L (..., 3) the matrix work left per phase (fwd, bwd,
    recompute). A stage whose share `f` of passes is paired hides f times this (a pass alone hides nothing)."""
    L = np.maximum(L, 0.0)
    return np.minimum(P[..., 0], L[..., 1] + L[..., 2]) + np.minimum(P[..., 1] + P[..., 2], L[..., 0])


def _paired_shares(p: int, v: int, m: np.ndarray) -> np.ndarray:
    """(plans, p) schedule.step.paired_fraction of every stage of p-stage, v-chunk pipelines with m (plans,)
    micro-batches (the scalar function, once per distinct m)."""
    u, inv = np.unique(m, return_inverse=True)
    table = np.array([_stage_shares(p, v, int(mm)) for mm in u]).reshape(u.size, p)
    return table[inv.reshape(-1)]


@functools.lru_cache(maxsize=4096)
def _stage_shares(p: int, v: int, m: int) -> tuple[float, ...]:
    return tuple(paired_fraction(s, p, v, m) for s in range(p))


def _per_plan(fn, T: np.ndarray, F: np.ndarray, m: np.ndarray) -> np.ndarray:
    """fn(T, F, m) of (n, p) stage arrays over (rows, p, variants) arrays: (rows, variants)."""
    rows, p, C = T.shape
    flat = lambda x: x.transpose(0, 2, 1).reshape(rows * C, p)  # noqa: E731
    return fn(flat(T), flat(F), np.repeat(m, C)).reshape(rows, C)


class Exact:
    """Step times of the plans of structural rows (see module docstring)."""

    def __init__(self, bulk: Bulk):
        self.b = bulk
        self.t, self.p = bulk.t, bulk.p
        self._group: np.ndarray | None = None
        self._cells: dict[tuple, Cells] = {}
        """Per grid part (and value): the values of the cells seen so far (`_grid`)."""

    def group_of_block(self) -> np.ndarray:
        """Group of every block: blocks whose variant lists are equal share one."""
        if self._group is None:
            t = self.t
            sig: dict[tuple, int] = {}
            nb = t.comm_start.size - 1
            cols = [t.comm[k] for k in ("plc", "dpo", "bucket", "tpo", "cpc", "epo", "disp")]
            out = np.zeros(nb, dtype=np.int64)
            for b in range(nb):
                lo, hi = int(t.comm_start[b]), int(t.comm_start[b + 1])
                key = tuple(tuple(c[lo:hi].tolist()) for c in cols)
                out[b] = sig.setdefault(key, len(sig))
            self._group = out
        return self._group

    def price_rows(self, sp: StructuralPrices, at: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(plan indices, step times) of every plan of the structural rows sp.rows[at]."""
        at = np.asarray(at, dtype=np.int64)
        t = self.t
        blocks = t.cols["block"][sp.rows[at]]
        groups = self.group_of_block()[blocks]
        order = np.argsort(groups, kind="stable")
        at, groups, blocks = at[order], groups[order], blocks[order]
        cuts = np.flatnonzero(np.diff(groups)) + 1
        idx_out, t_out = [], []
        for part in np.split(np.arange(at.size), cuts):
            if not part.size:
                continue
            b0 = int(blocks[part[0]])
            C = int(t.comm_start[b0 + 1] - t.comm_start[b0])
            step = max(1, _CELLS // max(1, C * self.b.Q))
            for k in range(0, part.size, step):
                sub = at[part[k:k + step]]
                times = self._group_times(sp, sub, b0)
                rows = sp.rows[sub]
                idx_out.append((t.starts[rows][:, None] + np.arange(C)[None, :]).reshape(-1))
                t_out.append(times.reshape(-1))
        if not idx_out:
            return np.zeros(0, dtype=np.int64), np.zeros(0)
        return np.concatenate(idx_out), np.concatenate(t_out)

    # ---- one group ----------------------------------------------------------------------------------------------
    def _grid(self, part, rows, J, row_keys, var_keys, lay, fn, value: str = "phase_sums",
              width: int = SUMS) -> np.ndarray:
        """(I, C, width) `value` (a Layout method: the phase sums, or the longest overlapped pipeline message) of
        the templates fn(key, row, variant) → template id on the plans' placements; the key is the row's tp, cp,
        dp, pp, ep, etp, sp, then `row_keys`, then the variant's placement and `var_keys`; `part` names fn.

        A cell's value is a function of its key for the engine's life: fn returns the part's memo (Parts.memo),
        keyed by knobs the key holds and written once; the placement (Parts.layout: tp ... etp and the placement
        code, all in the key) and its sums of a template (Layout.sums) are written once too. So each part keeps
        the values of the cells it has seen (parts.Cells) and calls fn only for cells it has not, in the order a
        loop over all of them would reach them (the same representative plans price the same memo entries)."""
        P, c = self.p, self.b.cols
        rk = [c[k][rows] for k in _OUTER] + list(row_keys)
        vk = [self.t.comm["plc"][J]] + list(var_keys)
        rfirst, ri = unique_rows(*rk)
        vfirst, vi = unique_rows(*vk)
        rkeys = list(zip(*(np.asarray(k)[rfirst].tolist() for k in rk)))
        vkeys = list(zip(*(np.asarray(k)[vfirst].tolist() for k in vk)))
        cells = self._cells.get((part, value))
        if cells is None:
            cells = self._cells[(part, value)] = Cells(width)
        r_id, v_id, slot = cells.lookup(rkeys, vkeys)
        for u, v in zip(*np.nonzero(slot < 0)):
            i, j = rfirst[u], vfirst[v]
            tid = fn(rkeys[u] + vkeys[v], int(rows[i]), int(J[j]))
            tm = P.templates[tid]
            k = int(lay[i, j])
            s = cells.add(k, tid, tm, getattr(P.layout_list[k], value)) if tm.transfers else 0
            cells.slot[r_id[u], v_id[v]] = slot[u, v] = s
        return cells.vals.take(slot.take(ri, axis=0).take(vi, axis=1), axis=0)

    def _layouts(self, rows, J, fields) -> np.ndarray:
        """(I, C) placement index of every plan."""
        c, cm, P = self.b.cols, self.t.comm, self.p
        outer = [c[k][rows] for k in _OUTER[:6]]
        rfirst, ri = unique_rows(*outer)
        plc = cm["plc"][J]
        pfirst, pi = unique_rows(plc)
        out = np.zeros((len(rfirst), len(pfirst)), dtype=np.int64)
        for u, i in enumerate(rfirst):
            for v, j in enumerate(pfirst):
                key = tuple(int(k[i]) for k in outer) + (int(plc[j]),)
                out[u, v] = P.layout(key, fields(int(rows[i]), int(J[j])))
        return out[ri[:, None], pi[None, :]]

    def _group_times(self, sp: StructuralPrices, at: np.ndarray, b0: int, lower: bool = False) -> np.ndarray:
        """Step times (rows, variants) of the structural rows sp.rows[at] (all of one group; b0 one of its
        blocks); with `lower`, (rows, dominant variants) lower bounds of every variant of their class (module
        docstring)."""
        bulk, t = self.b, self.t
        rows = sp.rows[at]
        J = np.arange(t.comm_start[b0], t.comm_start[b0 + 1])
        if lower:
            J = J[self.dominant(J)]
        cb = t.cols["block"]
        # fields of row r's plan with the variant of comm index j (of block b0): the same index in r's own block
        fields = lambda r, j: lambda: t.fields_at(r, int(t.comm_start[cb[r]] + j - t.comm_start[b0]))  # noqa: E731
        lay = self._layouts(rows, J, fields)
        # the stage times do not depend on the bucket size: price each other combination once
        cm = t.comm
        sfirst, sv = unique_rows(cm["plc"][J], cm["tpo"][J], cm["cpc"][J], cm["epo"][J], cm["disp"][J], cm["dpo"][J])
        pipe, cs_fwd, cs_bwd, ch_par, ch_bwd, ch_w0, q_win, q_drain = (
            x[:, sv] for x in self._stages(sp, at, rows, J[sfirst], lay[:, sfirst], fields, lower))
        if lower:  # any window: the most a variant of the class can hide; under 1F1B stage 0's sync bounds the step's
            cs_fwd = cs_bwd = ch_w0 = np.full(cs_fwd.shape, np.inf)
            ch_bwd = np.full(ch_bwd.shape, np.inf)
            one = np.broadcast_to(sp.first[at][:, None, :] & ~np.isnan(q_drain).all(axis=(1, 2))[:, None, None],
                                  q_drain.shape)
            q_win, q_drain = np.where(one, np.inf, np.nan), np.where(one, 0.0, np.nan)
        extra = self._step(sp, at, rows, J, lay, fields, cs_fwd, cs_bwd, ch_par, ch_bwd, ch_w0, q_win, q_drain)
        return pipe + extra + bulk.optimizer(sp)[at][:, None]

    def dominant(self, J: np.ndarray) -> np.ndarray:
        """Positions in J (a block's variants) of the dominant variant of each class: variants that share the
        placement, cp exchange and expert dispatch form a class; its dominant one has every overlap switch on
        that the class offers and, with dp overlap, the smallest bucket."""
        cm = self.t.comm
        bucket = np.asarray(self.t.buckets)[cm["bucket"][J]]
        order = np.lexsort((bucket, -cm["epo"][J], -cm["tpo"][J], -cm["dpo"][J], cm["disp"][J], cm["cpc"][J],
                            cm["plc"][J]))
        cls = np.stack([cm["plc"][J], cm["cpc"][J], cm["disp"][J]], axis=1)[order]
        first = np.ones(len(J), dtype=bool)
        first[1:] = (np.diff(cls, axis=0) != 0).any(axis=1)
        return np.sort(order[first])

    def dominant_count(self, rows: np.ndarray) -> np.ndarray:
        """Number of dominant variants (classes) of each structural row."""
        if getattr(self, "_ndom", None) is None:
            t = self.t
            nb = t.comm_start.size - 1
            self._ndom = np.array([self.dominant(np.arange(t.comm_start[b], t.comm_start[b + 1])).size
                                   for b in range(nb)], dtype=np.int64)
        return self._ndom[self.t.cols["block"][rows]]

    def lower_rows(self, sp: StructuralPrices, at: np.ndarray) -> np.ndarray:
        """A lower bound of the step time of every plan of each structural row sp.rows[at], from its dominant
        variants only (module docstring)."""
        at = np.asarray(at, dtype=np.int64)
        t = self.t
        out = np.full(at.size, np.inf)
        pos = np.arange(at.size)
        groups = self.group_of_block()[t.cols["block"][sp.rows[at]]]
        order = np.argsort(groups, kind="stable")
        cuts = np.flatnonzero(np.diff(groups[order])) + 1
        for part in np.split(order, cuts):
            if not part.size:
                continue
            b0 = int(t.cols["block"][sp.rows[at[part[0]]]])
            C = int(t.comm_start[b0 + 1] - t.comm_start[b0])
            step = max(1, _CELLS // max(1, C * self.b.Q))
            for k in range(0, part.size, step):
                sub = part[k:k + step]
                out[pos[sub]] = self._group_times(sp, at[sub], b0, lower=True).min(axis=1)
        return out

    def _stages(self, sp, at, rows, J, lay, fields, lower: bool = False):
        """(pipeline time, critical stage's forward compute per micro-batch, the window its gradient sync hides
        behind: its backward compute), each (rows, variants J), and under
        interleaving its chunks' parameter shares and backward times (rows, variants J, chunks) and rank 0's first
        chunk's backward (rows, variants J: the window a streaming chunk 0 has under `megatron`), and under 1F1B
        each class's first stage's backward compute and the backwards that run after its last one (rows, variants
        J, classes; NaN elsewhere: `_step`'s stage-by-stage sync)."""
        bulk, P, t = self.b, self.p, self.t
        c, cm = bulk.cols, t.comm
        I, Q, C = len(rows), bulk.Q, len(J)
        mbs, vpp, zero, m = c["mbs"][rows], c["vpp"][rows], bulk.zero[rows], bulk.m[rows]
        cp, pp, ep = (c[k][rows].astype(np.int64) for k in ("cp", "pp", "ep"))
        rck = bulk.rck[rows]
        dpo, tpo, cpc, epo, disp = cm["dpo"][J], cm["tpo"][J], cm["cpc"][J], cm["epo"][J], cm["disp"][J]
        moe = bulk.model.moe is not None
        zero_on = (zero == 3) | ((zero == 2) & (m > 1))
        # ZeRO traffic reads the stage, the micro-batches (ZeRO-2: (m − 1)/m of them), whether the dense and
        # the expert parameters are synced (dp·cp > 1, expert dp > 1) and dp_overlap
        tp_, etp_ = c["tp"][rows].astype(np.int64), c["etp"][rows].astype(np.int64)
        edp = (tp_ * cp * c["dp"][rows] // (np.where(etp_ > 0, etp_, tp_) * ep)) > 1
        zr = [np.where(zero_on, zero, -1), np.where(zero_on & (zero == 2), m, 0),
              (cp * c["dp"][rows] > 1).astype(np.int8), edp.astype(np.int8)]
        # memo keys name what each part reads (search.parts); the grid key is (tp, cp, dp, pp, ep, etp, sp,
        # row keys..., placement, variant keys...)

        def comm_key(k):
            tp_, cp_, dp_, pp_, ep_, etp_, sp_, mbs_, rc_, plc_, tpo_, cpc_, epo_, disp_ = k
            where = (dp_, pp_, plc_) if moe and disp_ == 1 and ep_ > 1 else ()  # dedup: the ep group's placement
            return (tp_, cp_, sp_, ep_, etp_, mbs_, rc_, tpo_, cpc_, epo_, disp_) + where

        def zero_key(k):  # tp, ep, etp, zero, ZeRO-2 micro-batches, dense synced, experts synced, dp_overlap
            return (k[0], k[4], k[5], k[7], k[8], k[9], k[10], k[12])
        coef, W, W_end = [], [], []
        for k, kind in enumerate(P.kinds):
            w = self._grid(("comm", kind), rows, J, [mbs, rck], [tpo, cpc, epo, disp], lay,
                           lambda key, r, j, kind=kind: P.layer_comm_id(comm_key(key), fields(r, j), kind[0]))
            w += self._grid(("zero", kind), rows, J, zr, [dpo], lay,
                            lambda key, r, j, kind=kind: P.layer_zero_id(zero_key(key), fields(r, j), kind[0]))
            coef.append(sp.counts[at][:, :, k])
            W.append(w)
        first, last, valid = sp.first[at], sp.last[at], sp.valid[at]
        empty = P.template_id([])
        for fl in ((True, True), (True, False), (False, True), (False, False)):
            sel = (first == fl[0]) & (last == fl[1]) & valid
            if not sel.any():
                continue
            if bulk.model.mtp_layers:  # the last stage's MTP blocks exchange as a layer does (comm_key's knobs)
                w = self._grid(("emb_comm_mtp", fl), rows, J, [mbs, rck], [tpo, cpc, epo, disp], lay,
                               lambda key, r, j, fl=fl: P.embedding_comm_id(comm_key(key), fields(r, j), *fl))
            else:
                w = self._grid(("emb_comm", fl), rows, J, [mbs], [], lay, lambda key, r, j, fl=fl:
                               P.embedding_comm_id((key[0], key[1], key[6], key[7]), fields(r, j), *fl))
            w += self._grid(("emb_zero", fl), rows, J, zr, [dpo], lay,
                            lambda key, r, j, fl=fl: P.embedding_zero_id(zero_key(key) + (int(key[3] == 1),),
                                                                        fields(r, j), *fl) if key[7] >= 0 else empty)
            W_end.append(sel[:, :, None, None] * w[:, None, :, :3])  # the end's own exchanges: its chunk's share
            w += self._grid(("pp", fl), rows, J, [vpp, mbs], [], lay, lambda key, r, j, fl=fl: P.pp_id(
                (key[3], key[0], key[1], key[7], key[8]), fields(r, j), *fl))
            coef.append(sel.astype(float))
            W.append(w)
        G = len(W)
        Wf = np.stack(W, axis=1).reshape(I, G, C * SUMS)
        Z = np.matmul(np.stack(coef, axis=2), Wf).reshape(I, Q, C, SUMS)
        # the recompute phase runs in the layers it re-runs and in the ends' share (build_workload: Megatron's
        # block method re-runs the first recompute_layers layers of each chunk, of whichever kinds they are)
        rerun, f_end = sp.rerun[at], sp.f_end[at]
        K = len(P.kinds)
        rc_coef = [rerun[:, :, :, k].sum(axis=2) for k in range(K)] + [x * f_end for x in coef[K:]]
        if any((a != b).any() for a, b in zip(rc_coef, coef)):
            Z[..., 2::3] = np.matmul(np.stack(rc_coef, axis=2), Wf).reshape(I, Q, C, SUMS)[..., 2::3]
        off = sp.f_off[at] * sp.saved[at]
        if (off > 0).any():  # activations to the host in forward and back in backward, hidden behind compute
            t_off = np.where(off > 0, host_copy_cost(off, bulk.system).time_s, 0.0)[:, :, None]
            for i in (0, 1, 3, 4):
                Z[..., i] += t_off
        hb = sp.gemm[at][:, :, None, :]
        ab = sp.attn[at][:, :, None, :] * ((cp - 1) / cp)[:, None, None, None]
        sb = hb * ((m - 1) / m)[:, None, None, None]  # ZeRO-2's per-micro-batch traffic: m − 1 of m backwards
        H_ph = np.minimum(hb, Z[..., 3:6] + np.minimum(Z[..., 6:9], ab) + np.minimum(Z[..., 12:15], sb))  # (I,Q,C,3)
        own = H_ph.sum(axis=-1)
        partner = _pass_pair_partnered(Z[..., 9:12], hb - H_ph)
        Cc = sp.compute[at]
        pair_f = np.minimum(Z[..., 9], np.maximum(hb - H_ph, 0.0)[..., 1:].sum(axis=-1))  # its forward part
        base = (Cc[:, :, 0], Cc[:, :, 1] + Cc[:, :, 2], Z[..., 0:3].sum(axis=-1), own, partner, Z[..., 0],
                H_ph[..., 0], pair_f)
        chunk_parts = (np.stack([w[..., :3] for w in W[:len(P.kinds)]], axis=2) if P.kinds else
                       np.zeros((I, C, 0, 3)), sum(W_end) if W_end else np.zeros((I, Q, C, 3)))
        # one overlapped pipeline message (interleaving): the fill and the drain wait for it at every chunk boundary
        send = np.zeros((I, C))
        inter = (pp > 1) & (vpp > 1)
        if inter.any():
            send[inter] = self._grid("send", rows[inter], J, [vpp[inter], mbs[inter]], [], lay[inter],
                                     lambda key, r, j: P.pp_id((key[3], key[0], key[1], key[7], key[8]), fields(r, j),
                                                               True, False), value="send_s", width=1)[..., 0]
        pipe, cs_fwd, cs_bwd = np.zeros((I, C)), np.zeros((I, C)), np.zeros((I, C))
        vmax = max((self.b.shapes[int(g)].chunks.shape[1] for g in np.unique(sp.shape[at])), default=1)
        ch_par, ch_bwd, ch_w0 = np.zeros((I, C, vmax)), np.zeros((I, C, vmax)), np.zeros((I, C))
        q_win, q_drain = np.full((I, C, Q), np.nan), np.full((I, C, Q), np.nan)
        shape = sp.shape[at]
        for g in np.unique(shape):
            k = np.flatnonzero(shape == g)
            sh = self.b.shapes[int(g)]
            T, F, fwd, bwd, e = self._stage_times(sh, base, k, m[k])
            v = sh.chunks.shape[1]
            wF = wB = None
            if v > 1 and not lower:  # a lower bound needs no shares (below, and _group_times)
                wF, wB = self._chunk_shares(sp, at[k], sh, e, chunk_parts[0][k], chunk_parts[1][k])
            if lower:  # every schedule keeps its busiest stage busy for all its work (schedule.pipeline)
                fill = np.where(pp[k] > 1, 2.0 * (pp[k] * vpp[k] - 1), 0.0)[:, None] * send[k]
                pipe[k] = m[k].astype(float)[:, None] * T.max(axis=1) + fill
                if v == 1 and sh.stage_class.size > 1:
                    pipe[k] = np.maximum(pipe[k], _per_plan(fill_bound, T, F, m[k]) + fill)
            else:
                pipe[k] = self._pipeline(T, F, m[k], v, wF, wB, send[k])
            # the critical stage: the first of the longest (predict's max over stages)
            crit = T.argmax(axis=1)[:, None, :]
            cs_fwd[k] = np.take_along_axis(fwd, crit, axis=1)[:, 0]
            cs_bwd[k] = np.take_along_axis(bwd, crit, axis=1)[:, 0]
            if v == 1 and sh.stage_class.size > 1:  # 1F1B: a class's first stage has the least drain after it
                nq = sh.minidx.size
                drain = np.cumsum(T - F, axis=1) - (T - F)  # (rows, stages, variants)
                q_win[k, :, :nq] = bwd[:, sh.minidx, :].transpose(0, 2, 1)
                q_drain[k, :, :nq] = drain[:, sh.minidx, :].transpose(0, 2, 1)
            if v > 1 and lower:
                # with an unlimited window the chunked sync exposes chunk 0's last bucket, which grows with chunk 0's
                # share: the least over the stages bounds whichever stage a variant finds critical
                ch_par[k, :, 0] = self._chunk_params(sp, at[k], sh)[:, :, 0].min(axis=1)[:, None]
            elif v > 1:  # its chunks' parameter shares and backward times (schedule.chunks.chunked_sync_exposed_s)
                par = self._chunk_params(sp, at[k], sh)  # (rows, p, v)
                c3 = crit[:, 0, :, None]  # (rows, C, 1)
                ch_par[k, :, :v] = np.take_along_axis(par[:, None, :, :], c3[..., None], axis=2)[:, :, 0]
                b_crit = np.take_along_axis(T - F, crit, axis=1)[:, 0]  # (rows, C)
                w_crit = np.take_along_axis(wB.transpose(0, 3, 1, 2), c3[..., None], axis=2)[:, :, 0]
                ch_bwd[k, :, :v] = b_crit[:, :, None] * w_crit
                ch_w0[k] = (T - F)[:, 0, :] * wB[:, 0, 0, :]
        return pipe, cs_fwd, cs_bwd, ch_par, ch_bwd, ch_w0, q_win, q_drain

    def _stage_times(self, sh, base, k, m):
        """(time, forward pass, forward compute, backward compute, (forward, backward) exposed shares) per
        micro-batch of every stage of the plans of rows k (all of pipeline shape `sh`), each (rows, stages,
        variants): its class's compute and transfers, with the pass-pair traffic priced at the stage's own share of
        paired passes (schedule.step.paired_fraction), as predict prices each stage. A forward pass is its compute,
        the slowdown of what hides beside it and the traffic it exposes (StageTimes.fwd_s)."""
        at = np.ix_(k, sh.stage_class)
        c_fwd, c_bwd, total, own, partner, z_f, own_f, pair_f = (x[at] for x in base)
        f = _paired_shares(sh.stage_class.size, sh.chunks.shape[1], m)[:, :, None]
        H = own + f * partner
        H_f = own_f + f * pair_f
        slow = self.b.cal.overlap_compute_slowdown
        fwd = c_fwd[:, :, None] + slow * H_f
        bwd = c_bwd[:, :, None] + slow * (H - H_f)
        F = fwd + (z_f - H_f)
        z_b = total - z_f
        e = (np.where(z_f > 0, (z_f - H_f) / np.where(z_f > 0, z_f, 1.0), 0.0),
             np.where(z_b > 0, (z_b - (H - H_f)) / np.where(z_b > 0, z_b, 1.0), 0.0))
        return fwd + bwd + (total - H), F, fwd, bwd, e

    @staticmethod
    def _pipeline(T, F, m, v, wF, wB, send) -> np.ndarray:
        """(rows, variants) `schedule.pipeline.pipeline_time_s` of plans of one pipeline shape: their stages' times
        and forward passes (rows, stages, variants), the chunks' forward and backward shares (rows, stages, chunks,
        variants; schedule.chunks.chunk_shares) and one overlapped message."""
        rows, p, C = T.shape
        n = rows * C
        flat = lambda x: x.transpose(0, 2, 1).reshape(n, p)  # noqa: E731
        chunks = lambda w: None if w is None else w.transpose(0, 3, 1, 2).reshape(n, p, v)  # noqa: E731
        return pipeline_times(flat(T), flat(F), np.repeat(m, C), v, chunks(wF), send.reshape(n),
                              chunks(wB)).reshape(rows, C)

    def _chunk_shares(self, sp, at, sh, e, comm_kind, comm_end) -> tuple[np.ndarray, np.ndarray]:
        """(forward, backward) shares (rows, stages, chunks, variants) of each stage's pass its chunks take:
        `schedule.chunks.chunk_shares` over plans — each layer kind's and the stage's end's ops (StructuralPrices
        kind_cost, end_cost) and transfers (comm_kind (rows, variants, kinds, 3), comm_end (rows, classes,
        variants, 3)) at the stage's exposed shares `e`, the recompute in the layers each chunk re-runs
        (StructuralPrices rerun) and the ends' share of it (f_end); equal (1/v)
        where every stage's chunks come out within 1e-9 in both passes (the scalar function's None)."""
        p, v = sh.stage_class.size, sh.chunks.shape[1]
        # a stage at neither end whose chunks hold and re-run alike layers (every plan here) splits evenly
        rr_all = sp.rerun[at][:, :len(sh.mult), :v]  # (rows, classes, v, K): the layers each chunk's recompute runs in
        alike = (sh.chunk_counts == sh.chunk_counts[:, :1]).all(axis=(1, 2)) \
            & (rr_all == rr_all[:, :, :1]).all(axis=(0, 2, 3))
        ns = np.flatnonzero((sh.first | sh.last | ~alike)[sh.stage_class])
        sc = sh.stage_class[ns]
        n, C = e[0].shape[0], e[0].shape[2]
        eF, eB = e[0][:, ns], e[1][:, ns]  # (rows, stages priced, C)
        fr = sp.f_end[at][:, sc]  # (rows, stages priced)
        kc = sp.kind_cost[at][:, None, None, :, :]  # (rows, 1, 1, K, 3)
        x = comm_kind[:, None, :, :, :]  # (rows, 1, C, K, 3)
        aF, aB, aR = (kc[..., i] + ek[..., None] * x[..., i] for i, ek in ((0, eF), (1, eB), (2, eB)))
        cc = sh.chunk_counts[sc]  # (stages priced, v, K)
        rr = rr_all[:, sc]  # (rows, stages priced, v, K)
        raw = [np.einsum("pvk,npck->npvc", cc, aF),
               np.einsum("pvk,npck->npvc", cc, aB) + np.einsum("npvk,npck->npvc", rr, aR)]
        ec, ex = sp.end_cost[at][:, sc], comm_end[:, sc]  # (rows, stages priced, 3), (rows, stages priced, C, 3)
        end = (ec[..., 0:1] + eF * ex[..., 0],
               ec[..., 1:2] + fr[:, :, None] * ec[..., 2:3] + eB * (ex[..., 1] + fr[:, :, None] * ex[..., 2]))
        first, last = sh.first[sc], sh.last[sc]
        out = []
        for r, x in zip(raw, end):
            r[:, first, 0, :] += x[:, first, :]
            r[:, last, v - 1, :] += x[:, last, :]
            tot = r.sum(axis=2, keepdims=True)
            w = np.full((n, p, v, C), 1.0 / v)
            w[:, ns] = np.where(tot > 0, r / np.where(tot > 0, tot, 1.0), 1.0 / v)
            out.append(w)
        spread = np.maximum(*((w.max(axis=2) - w.min(axis=2)).max(axis=1) for w in out))  # (rows, C)
        equal = spread <= 1e-9
        for w in out:
            w.transpose(0, 3, 1, 2)[equal] = 1.0 / v
        return out[0], out[1]

    @staticmethod
    def _chunk_params(sp, at, sh) -> np.ndarray:
        """(rows, stages, chunks) share of each stage's parameters its chunks hold (schedule.chunks.
        chunk_param_shares): each kind's layers, the end in the first stage's first chunk or the last's last."""
        sc = sh.stage_class
        v = sh.chunks.shape[1]
        par = np.einsum("pvk,nk->npv", sh.chunk_counts[sc], sp.layer_params[at])
        ends = sp.end_params[at][:, sc]
        first, last = sh.first[sc], sh.last[sc]
        par[:, first, 0] += ends[:, first]
        par[:, last, v - 1] += ends[:, last]
        tot = par.sum(axis=2, keepdims=True)
        return np.where(tot > 0, par / np.where(tot > 0, tot, 1.0), 1.0 / v)

    def _step_prices(self, rows, J, lay, fields, params, expert) -> tuple[np.ndarray, np.ndarray]:
        """(time, info) (rows, variants J, transfers) of the once-per-step transfers of a rank holding `params`
        parameters (`expert` of them in routed experts), each (rows,); info as search.parts's templates."""
        bulk, P, t = self.b, self.p, self.t
        cm, c = t.comm, bulk.cols
        rk = [bulk.zero[rows]] + [c[k][rows] for k in _OUTER[:6]]
        rfirst, ri = _unique_float(*rk, params, expert)
        dpo, plc = cm["dpo"][J], cm["plc"][J]
        vfirst, vi = unique_rows(dpo, plc)
        tids = np.zeros((len(rfirst), len(vfirst)), dtype=np.int64)
        for u, i in enumerate(rfirst):
            base = tuple(int(k[i]) for k in rk)
            for v, j in enumerate(vfirst):
                key = base + (int(dpo[j]),)
                tids[u, v] = P.step_id(key, fields(int(rows[i]), int(J[j])), float(params[i]), float(expert[i]))
        S = max(len(P.templates[int(x)].transfers) for x in tids.reshape(-1)) if tids.size else 0
        times = np.zeros((len(rfirst), len(vfirst), S))
        info = np.zeros((len(rfirst), len(vfirst), S, 4))
        for u, i in enumerate(rfirst):
            for v, j in enumerate(vfirst):
                tm = P.templates[int(tids[u, v])]
                L = P.layout_list[int(lay[i, j])]
                for s, (tr, cnt) in enumerate(zip(tm.transfers, tm.count)):
                    times[u, v, s] = L.time_s(tr) * cnt
                info[u, v, :len(tm.transfers)] = tm.info
        return times[ri[:, None], vi[None, :]], info[ri[:, None], vi[None, :]]

    def _step(self, sp, at, rows, J, lay, fields, cs_fwd, cs_bwd, ch_par, ch_bwd, ch_w0, q_win, q_drain
              ) -> np.ndarray:
        """Exposed once-per-step communication (I, C): the gradient sync and ZeRO-1/2 gather, bucketed and overlapped
        with the critical stage's backward (or next forward) when dp_overlap — an interleaved stage's sync chunk by
        chunk through the cool-down (ch_par, ch_bwd: its chunks' parameter shares and backward times), a 1F1B
        pipeline's stage by stage (q_win, q_drain: `_staged_sync`) — and the tied-embedding all-reduce."""
        bulk, t = self.b, self.t
        c = bulk.cols
        I, C = len(rows), len(J)
        times, info = self._step_prices(rows, J, lay, fields, sp.params_top[at], sp.expert_top[at])
        bucket = np.asarray(t.buckets)[t.comm["bucket"][J]][None, :]
        slow = bulk.cal.overlap_compute_slowdown
        pp = c["pp"][rows].astype(float)[:, None]
        inter = c["vpp"][rows] > 1
        out, sync = np.zeros((I, C)), np.zeros((I, C))
        for s in range(times.shape[-1]):
            total = times[..., s]
            is_dp, is_ag, ov, msg = info[..., s, 0] > 0, info[..., s, 1] > 0, info[..., s, 2] > 0, info[..., s, 3]
            window = np.where(is_ag, cs_fwd, cs_bwd)
            exp = bucketed_exposed(total, msg, bucket, window, slow)
            rows_c = np.flatnonzero(inter & (is_dp & ov & ~is_ag).any(axis=1))
            if rows_c.size:  # an interleaved stage's sync, chunk by chunk through the cool-down
                sub = np.broadcast_to(bucket, total.shape)[rows_c]
                launch = t.space.base.grad_sync_launch  # every plan of a search keeps the base plan's
                chunked = chunked_exposed(total[rows_c], msg[rows_c], sub, ch_par[rows_c], ch_bwd[rows_c],
                                          pp[rows_c], slow, chunk_streams(launch, ch_par.shape[-1]),
                                          ch_w0[rows_c] if launch == "megatron" else None)
                exp[rows_c] = np.where(~is_ag[rows_c], chunked, exp[rows_c])
            exp = np.where(ov, exp, total)
            out += np.where(is_dp, exp, total)
            sync += np.where(is_dp & ~is_ag, exp, 0.0)
        staged = np.flatnonzero(~np.isnan(q_drain).all(axis=(1, 2)))
        if staged.size:  # the sync priced above was the largest stage's against one window: replace it
            out[staged] += self._staged_sync(sp, at[staged], rows[staged], J, lay[staged], fields,
                                             q_win[staged], q_drain[staged], bucket, slow) - sync[staged]
        return out

    def _staged_sync(self, sp, at, rows, J, lay, fields, q_win, q_drain, bucket, slow) -> np.ndarray:
        """(rows, variants) `schedule.step._staged_sync` of 1F1B plans: each class's sync at its own parameters,
        streamed behind its first stage's backward (`q_win`) where that stage's buckets stream, less the backwards
        the cool-down runs after that stage's last one (`q_drain`); the most over the classes (a class's first stage
        binds for its class: a later one has at least its window less left of the drain)."""
        launch = self.t.space.base.grad_sync_launch
        best = np.full(q_drain.shape[:2], -np.inf)
        for q in range(q_drain.shape[2]):
            i = np.flatnonzero(~np.isnan(q_drain[:, 0, q]))
            if not i.size:
                continue
            times, info = self._step_prices(rows[i], J, lay[i], fields, sp.params_cls[at[i], q],
                                            sp.expert_cls[at[i], q])
            streams = ((launch == "hooks") | sp.first[at[i], q])[:, None]
            e = np.zeros((i.size, len(J)))
            for s in range(times.shape[-1]):
                total = times[..., s]
                sync, ov, msg = (info[..., s, 0] > 0) & (info[..., s, 1] == 0), info[..., s, 2] > 0, info[..., s, 3]
                exp = np.where(ov & streams, bucketed_exposed(total, msg, bucket, q_win[i, :, q], slow), total)
                e += np.where(sync, exp, 0.0)
            best[i] = np.maximum(best[i], e - q_drain[i, :, q])
        return np.maximum(best, 0.0)


def chunked_exposed(total_s, message_bytes, bucket_bytes, shares, bwd_s, pp, slowdown, streams=None,
                    first_window_s=None):
    """`schedule.chunks.chunked_sync_exposed_s` over arrays: total_s, message_bytes, bucket_bytes (I, C), shares
    and bwd_s (I, C, v) (chunks past a shape's own v carry nothing), pp (I, 1); `streams` as there (per chunk, None:
    all), `first_window_s` (I, C) or None as there."""
    exposed, later, gap = np.zeros_like(total_s), np.zeros_like(total_s), np.zeros_like(total_s)
    safe = np.where(bucket_bytes > 0, bucket_bytes, 1.0)
    held = np.flatnonzero((shares > 0).any(axis=(0, 1)))
    for k in range(int(held[-1]) + 1 if held.size else 0):
        d = total_s * shares[..., k]
        n = np.where(bucket_bytes > 0, np.maximum(1.0, message_bytes * shares[..., k] / safe), 1.0)
        streamed = streams is None or streams[k]
        window = first_window_s if k == 0 and first_window_s is not None else bwd_s[..., k]
        exposed = np.maximum(exposed, (bucket_tail(d, n, window) if streamed else d) + later - gap)
        later = later + d
        gap = gap + pp * bwd_s[..., k]
    exposed = np.minimum(total_s, np.maximum(0.0, exposed))
    return exposed + slowdown * (total_s - exposed)


def _unique_float(*cols) -> tuple[np.ndarray, np.ndarray]:
    stacked = np.stack([np.asarray(x, dtype=np.float64) for x in cols], axis=1)
    _, first, inv = np.unique(stacked, axis=0, return_index=True, return_inverse=True)
    return first, inv.reshape(-1)
