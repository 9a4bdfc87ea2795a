"""The step time of every plan of some structural rows: all their communication variants at once.

Plans come in blocks (search.table): the structural rows of a block share tp, pp, cp, dp, sp, ep and etp, and every
one of them has the block's list of communication variants (placement, overlap switches, bucket, cp exchange, expert
dispatch). A block is priced as a grid rows × variants: a part keyed by some row knobs and some variant knobs is
looked up once per distinct pair, and the arithmetic runs over (rows, variants, stage classes) arrays.

The overlap of a stage's transfers with its compute has a closed form. `schedule.step.predict` walks the transfers
in order: one that hides behind its phase's matrix work hides min(t, hb) and spends hb; one that hides behind the
attention core hides min(t, ab, hb) and spends both (hb starts at the phase's matrix time, ab at its attention time
× (cp − 1)/cp). Without hb the walk hides X = P + min(A, ab) (P, A: the two kinds' totals; a greedy fill of one
budget hides min(total, budget)); with hb every transfer hides what it would without it until the running total
reaches hb, and nothing after. So the phase hides H = min(hb, P + min(A, ab)) whatever the order, and the stage takes
compute + transfers − (1 − slowdown)·H. This module uses that identity; tests/search hold it against predict.
"""
from __future__ import annotations

import numpy as np

from narrowpath.schedule.step import host_copy_cost
from narrowpath.search.bulk import Bulk, StructuralPrices, _first_max, unique_rows

_CELLS = 300_000
"""Rows × variants × classes priced at once (bounds the arrays to a few tens of MB)."""


def bucketed_exposed(total_s, message_bytes, bucket_bytes, window_s, slowdown):
    """`schedule.step.exposed_after_bucketed_overlap` over arrays (same formula, element by element)."""
    safe = np.where(bucket_bytes > 0, bucket_bytes, 1.0)
    n_buckets = np.where(bucket_bytes > 0, np.maximum(1.0, message_bytes / safe), 1.0)
    last_bucket = total_s / n_buckets
    hidden = np.maximum(0.0, np.minimum(total_s - last_bucket, window_s))
    return total_s - hidden + slowdown * hidden


class Exact:
    """Step times of the plans of structural rows (see module docstring)."""

    def __init__(self, bulk: Bulk):
        self.b = bulk
        self.t, self.p = bulk.t, bulk.p

    def price_rows(self, sp: StructuralPrices, at: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(plan indices, step times) of every plan of the structural rows sp.rows[at]."""
        at = np.asarray(at, dtype=np.int64)
        blocks = self.t.cols["block"][sp.rows[at]]
        order = np.argsort(blocks, kind="stable")
        at, blocks = at[order], blocks[order]
        cuts = np.flatnonzero(np.diff(blocks)) + 1
        idx_out, t_out = [], []
        for part in np.split(np.arange(at.size), cuts):
            if not part.size:
                continue
            b = int(blocks[part[0]])
            C = int(self.t.comm_start[b + 1] - self.t.comm_start[b])
            step = max(1, _CELLS // max(1, C * self.b.Q))
            for k in range(0, part.size, step):
                sub = at[part[k:k + step]]
                times = self._block(sp, sub, b)
                rows = sp.rows[sub]
                idx_out.append((self.t.starts[rows][:, None] + np.arange(C)[None, :]).reshape(-1))
                t_out.append(times.reshape(-1))
        if not idx_out:
            return np.zeros(0, dtype=np.int64), np.zeros(0)
        return np.concatenate(idx_out), np.concatenate(t_out)

    # ---- one block ----------------------------------------------------------------------------------------------
    def _grid(self, rows, J, row_keys, var_keys, lay, fn) -> np.ndarray:
        """(I, C, 9) phase sums of the templates fn(key, row, variant) → template id, on the variants' layouts."""
        P = self.p
        I, C = len(rows), len(J)
        if row_keys:
            rfirst, ri = unique_rows(*row_keys)
        else:
            rfirst, ri = np.zeros(1, dtype=np.int64), np.zeros(I, dtype=np.int64)
        vfirst, vi = unique_rows(*(var_keys + [lay]))
        out = np.zeros((len(rfirst), len(vfirst), 9))
        for u, i in enumerate(rfirst):
            for v, jv in enumerate(vfirst):
                key = tuple(int(k[i]) for k in row_keys) + tuple(int(k[jv]) for k in var_keys)
                tid = fn(key, int(rows[i]), int(J[jv]))
                tm = P.templates[tid]
                if tm.transfers:
                    out[u, v] = P.layout_list[int(lay[jv])].phase_sums(tid, tm)
        return out[ri][:, vi]

    def _block(self, sp: StructuralPrices, at: np.ndarray, b: int) -> np.ndarray:
        """Step times (rows, variants) of the structural rows sp.rows[at] of block b."""
        bulk, P, t = self.b, self.p, self.t
        c, cm = bulk.cols, t.comm
        rows = sp.rows[at]
        J = np.arange(t.comm_start[b], t.comm_start[b + 1])
        C = len(J)
        r0 = int(rows[0])
        consts = tuple(int(c[k][r0]) for k in ("tp", "pp", "cp", "dp", "ep", "etp", "sp"))
        tp, pp, cp, dp, ep, etp, _ = consts
        fields = lambda r, j: lambda: t.fields(int(t.starts[r] + j - t.comm_start[b]))  # noqa: E731
        plc = cm["plc"][J]
        lay_of: dict[int, int] = {}
        lay = np.zeros(C, dtype=np.int64)
        for jj in range(C):
            k = int(plc[jj])
            if k not in lay_of:
                lay_of[k] = P.layout((tp, cp, dp, pp, ep, etp, k), fields(r0, int(J[jj])))
            lay[jj] = lay_of[k]
        # the stage times do not depend on the bucket size: price each other combination once
        sfirst, sv = unique_rows(lay, cm["tpo"][J], cm["cpc"][J], cm["epo"][J], cm["disp"][J], cm["dpo"][J])
        pipe, cs_fwd, cs_bwd = self._stages(sp, at, rows, J[sfirst], lay[sfirst], fields, consts)
        pipe, cs_fwd, cs_bwd = pipe[:, sv], cs_fwd[:, sv], cs_bwd[:, sv]
        extra = self._step(sp, at, rows, J, lay, fields, cs_fwd, cs_bwd, (tp, cp, dp, ep, etp, pp))
        return pipe + extra + bulk.optimizer(sp)[at][:, None]

    def _stages(self, sp, at, rows, J, lay, fields, consts):
        """(pipeline time, critical stage's forward and backward time per micro-batch), each (rows, variants J)."""
        bulk, P, t = self.b, self.p, self.t
        c, cm = bulk.cols, t.comm
        tp, pp, cp, dp, ep, etp, spv = consts
        I, Q, C = len(rows), bulk.Q, len(J)
        mbs, vpp, zero, m = c["mbs"][rows], c["vpp"][rows], c["zero"][rows], bulk.m[rows]
        rc = bulk.rc[rows]
        dpo, tpo, cpc, epo, disp = cm["dpo"][J], cm["tpo"][J], cm["cpc"][J], cm["epo"][J], cm["disp"][J]
        moe = bulk.model.moe is not None
        dedup_lay = np.where((disp == 1) & (ep > 1), lay, -1) if moe else np.full(C, -1)
        zero_on = (zero == 3) | ((zero == 2) & (m > 1))
        zr = [np.where(zero_on, zero, -1), np.where(zero_on, m, -1)]
        zv = [dpo]
        # the transfer sums of each class: layer kinds by count, the ends by class (one matrix product per row)
        coef, W = [], []
        for k, kind in enumerate(P.kinds):
            w = self._grid(rows, J, [mbs, rc], [tpo, cpc, epo, disp, dedup_lay], lay,
                           lambda key, r, j, kind=kind: P.layer_comm_id((tp, cp, spv, ep, etp) + key,
                                                                       fields(r, j), kind[0]))
            w += self._grid(rows, J, zr, zv, lay,
                            lambda key, r, j, kind=kind: P.layer_zero_id((tp, cp, dp, ep, etp) + key,
                                                                        fields(r, j), kind[0]))
            coef.append(sp.counts[at][:, :, k])
            W.append(w)
        first, last, valid = sp.first[at], sp.last[at], sp.valid[at]
        for fl in ((True, True), (True, False), (False, True), (False, False)):
            sel = (first == fl[0]) & (last == fl[1]) & valid
            if not sel.any():
                continue
            w = self._grid(rows, J, [mbs], [], lay, lambda key, r, j, fl=fl: P.embedding_comm_id(
                (tp, cp, spv) + key, fields(r, j), *fl))
            w += self._grid(rows, J, zr + [np.full(I, int(pp == 1))], zv, lay,
                            lambda key, r, j, fl=fl: P.embedding_zero_id((tp, cp, dp, ep, etp) + key,
                                                                        fields(r, j), *fl) if key[0] >= 0
                            else P.template_id([]))
            w += self._grid(rows, J, [vpp, mbs], [], lay, lambda key, r, j, fl=fl: P.pp_id(
                (pp, tp, cp) + key, fields(r, j), *fl))
            coef.append(sel.astype(float))
            W.append(w)
        G = len(W)
        Z = np.matmul(np.stack(coef, axis=2), np.stack(W, axis=1).reshape(I, G, C * 9)).reshape(I, Q, C, 9)
        f_rc = sp.f_rc[at]
        if (f_rc < 1.0).any():
            Z[..., 2::3] *= np.where(f_rc < 1.0, f_rc, 1.0)[:, :, None, None]
        off = sp.f_off[at] * sp.saved[at]
        if (off > 0).any():  # activations to the host in forward and back in backward, hidden behind compute
            t_off = np.where(off > 0, host_copy_cost(off, bulk.system).time_s, 0.0)[:, :, None]
            for i in (0, 1, 3, 4):
                Z[..., i] += t_off
        hb = sp.gemm[at][:, :, None, :]
        ab = sp.attn[at][:, :, None, :] * ((cp - 1) / cp)
        H = np.minimum(hb, Z[..., 3:6] + np.minimum(Z[..., 6:9], ab)).sum(axis=-1)  # (I, Q, C)
        slow = bulk.cal.overlap_compute_slowdown
        Cc = sp.compute[at]
        fwd = np.broadcast_to(Cc[:, :, None, 0], (I, Q, C))
        bwd = (Cc[:, :, 1] + Cc[:, :, 2])[:, :, None] + slow * H
        T = fwd + bwd + (Z[..., 0:3].sum(axis=-1) - H)
        v_ok = valid[:, :, None]
        Tv = np.where(v_ok, T, -np.inf)
        Tmax = Tv.max(axis=1)
        Tmean = (np.where(v_ok, T, 0.0) * sp.mult[at][:, :, None]).sum(axis=1) / pp
        pipe = m.astype(float)[:, None] * Tmax + ((pp - 1) * Tmean / vpp.astype(float)[:, None] if pp > 1 else 0.0)
        crit = _first_max(Tv.transpose(0, 2, 1).reshape(I * C, Q), np.repeat(sp.minidx[at], C, axis=0)).reshape(I, C)
        ii, jj = np.meshgrid(np.arange(I), np.arange(C), indexing="ij")
        return pipe, fwd[ii, crit, jj], bwd[ii, crit, jj]

    def _step(self, sp, at, rows, J, lay, fields, cs_fwd, cs_bwd, consts) -> np.ndarray:
        """Exposed once-per-step communication (I, C): the gradient sync and ZeRO-1/2 gather, bucketed and overlapped
        with the critical stage's backward (or next forward) when dp_overlap, and the tied-embedding all-reduce."""
        bulk, P, t = self.b, self.p, self.t
        cm = t.comm
        tp, cp, dp, ep, etp, pp = consts
        I, C = len(rows), len(J)
        params, expert = sp.params_top[at], sp.expert_top[at]
        zero = bulk.cols["zero"][rows]
        rfirst, ri = _unique_float(zero, params, expert)
        dpo = cm["dpo"][J]
        vfirst, vi = unique_rows(dpo, lay)
        tids = np.zeros((len(rfirst), len(vfirst)), dtype=np.int64)
        for u, i in enumerate(rfirst):
            for v, j in enumerate(vfirst):
                key = (int(zero[i]), int(dpo[j]), tp, cp, dp, ep, etp, int(pp > 1))
                tids[u, v] = P.step_id(key, fields(int(rows[i]), int(J[j])), float(params[i]), float(expert[i]))
        S = max(len(P.templates[int(x)].transfers) for x in tids.reshape(-1)) if tids.size else 0
        times = np.zeros((len(rfirst), len(vfirst), S))
        info = np.zeros((len(rfirst), len(vfirst), S, 4))
        for u in range(len(rfirst)):
            for v, j in enumerate(vfirst):
                tm = P.templates[int(tids[u, v])]
                L = P.layout_list[int(lay[j])]
                for s, (tr, cnt) in enumerate(zip(tm.transfers, tm.count)):
                    times[u, v, s] = L.time_s(tr) * cnt
                info[u, v, :len(tm.transfers)] = tm.info
        times, info = times[ri][:, vi], info[ri][:, vi]
        bucket = np.asarray(t.buckets)[cm["bucket"][J]][None, :]
        slow = bulk.cal.overlap_compute_slowdown
        out = np.zeros((I, C))
        for s in range(S):
            total = times[..., s]
            is_dp, is_ag, ov, msg = info[..., s, 0] > 0, info[..., s, 1] > 0, info[..., s, 2] > 0, info[..., s, 3]
            window = np.where(is_ag, cs_fwd, cs_bwd)
            exp = np.where(ov, bucketed_exposed(total, msg, bucket, window, slow), total)
            out += np.where(is_dp, exp, total)
        return out


def _unique_float(*cols) -> tuple[np.ndarray, np.ndarray]:
    stacked = np.stack([np.asarray(x, dtype=np.float64) for x in cols], axis=1)
    _, first, inv = np.unique(stacked, axis=0, return_index=True, return_inverse=True)
    return first, inv.reshape(-1)
