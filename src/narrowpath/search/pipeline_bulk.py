"""`schedule.pipeline.pipeline_time_s` for many plans of one pipeline shape (p stages, v chunks) at once.

The same branches as the scalar function, chosen per plan: Narayanan's form for equal stages (or an interleaved
split Megatron refuses, or equal chunks), the 1F1B closed form for a cheap first and an expensive last stage around
equal middle ones, and otherwise the schedule played (`search.replay`, the playback compiled once per program
shape and replayed on arrays), 1F1B up to 4p micro-batches then at the busiest stage's pace, interleaved up to 3p
micro-batches then extrapolated from the plays of 2p and 3p (played together); plus the fill and drain latency of
overlapped sends. tests/search/test_replay.py holds it to the scalar function on random stage times.
"""
from __future__ import annotations

import numpy as np

from narrowpath.schedule.pipeline import _REL_EQUAL
from narrowpath.search.replay import graph_1f1b, graph_interleaved, makespans


def _uniform(x: np.ndarray) -> np.ndarray:
    """`schedule.pipeline._uniform` along the last axis (its extremes taken slice by slice: a reduction along a
    short last axis costs more; maxima and minima are exact, so the test is the same)."""
    hi, lo = x[..., 0].copy(), x[..., 0].copy()
    for k in range(1, x.shape[-1]):
        np.maximum(hi, x[..., k], out=hi)
        np.minimum(lo, x[..., k], out=lo)
    return hi - lo <= _REL_EQUAL * np.maximum(np.abs(hi), 1e-300)


def _seq_sum(x: np.ndarray) -> np.ndarray:
    """Sum along the last axis left to right (as Python's sum)."""
    out = np.zeros(x.shape[:-1])
    for k in range(x.shape[-1]):
        out = out + x[..., k]
    return out


def one_f_one_b(F: np.ndarray, B: np.ndarray, m: np.ndarray) -> np.ndarray:
    """`schedule.pipeline.one_f_one_b_time_s` over plans (rows of F, B)."""
    n, p = F.shape
    total_f = _seq_sum(F)
    best = np.zeros(n)
    f_before = np.zeros(n)
    b_before = np.zeros(n)
    b_after = _seq_sum(B)
    mf = m.astype(float)
    for b in range(p):
        b_after = b_after - B[:, b]
        w = np.minimum(p - b - 1, m)
        ahead = np.minimum(w + 1, m).astype(float)
        reach = np.maximum(total_f + b_after, f_before + ahead * F[:, b])
        rest = mf * B[:, b] + (mf - ahead) * F[:, b]
        best = np.maximum(best, reach + rest + b_before)
        f_before = f_before + F[:, b]
        b_before = b_before + B[:, b]
    return best


def _played(schedule: str, F: np.ndarray, B: np.ndarray, *ms: int) -> list[np.ndarray]:
    """`schedule.pipeline.played_time_s` over plans, for each micro-batch count of ms: F, B (n, p, v) per-chunk
    pass times (1F1B rendezvous or interleaved async, the two the step model plays). The counts are played
    together (`search.replay.makespans`)."""
    n, p, v = F.shape
    graphs = tuple(graph_1f1b(p, m) if schedule == "1f1b" else graph_interleaved(p, v, m) for m in ms)
    return makespans(graphs, np.stack([F, B], axis=2))


def fill_bound(T: np.ndarray, F: np.ndarray, m: np.ndarray) -> np.ndarray:
    """A lower bound of a one-chunk pipeline's time whatever its schedule: for every stage b, micro-batch 0's forward
    must reach b through the stages before it, b then runs all its m passes one after another, and its last
    backward's gradient must return through the stages before it: max_b Σ_{i<b} F_i + m·T_b + Σ_{i<b} B_i
    (Narayanan's form and the closed form meet it with equal stages; a played schedule cannot beat it)."""
    n, p = T.shape
    best = np.zeros(n)
    f_before = np.zeros(n)
    b_before = np.zeros(n)
    mf = np.asarray(m, dtype=float)
    for b in range(p):
        best = np.maximum(best, f_before + mf * T[:, b] + b_before)
        f_before = f_before + F[:, b]
        b_before = b_before + (T[:, b] - F[:, b])
    return best


def pipeline_times(T: np.ndarray, F: np.ndarray, m: np.ndarray, v: int, shares: np.ndarray | None,
                   send: np.ndarray, bwd_shares: np.ndarray | None = None) -> np.ndarray:
    """Pipeline time of n plans of one shape: T, F (n, p) stage times and their forward parts, m (n,) micro-batches,
    shares (n, p, v) the chunks' shares of the forward (None: equal), send (n,) one overlapped message's time,
    bwd_shares their shares of the backward (default the forward's)."""
    n, p = T.shape
    m = np.asarray(m, dtype=np.int64)
    tmax = T.max(axis=1)
    mf = m.astype(float)
    if p == 1:
        return mf * tmax
    out = np.full(n, np.nan)
    if bwd_shares is None:
        bwd_shares = shares
    equal_chunks = np.ones(n, dtype=bool) if shares is None else \
        _uniform(shares).all(axis=1) & _uniform(bwd_shares).all(axis=1)
    narayanan = (_uniform(T) & equal_chunks) | ((v > 1) & (m % p != 0))
    if v > 1:
        narayanan |= equal_chunks
    out[narayanan] = mf[narayanan] * tmax[narayanan] + (p - 1) * (_seq_sum(T[narayanan]) / p) / v
    rest = np.flatnonzero(~narayanan)
    if rest.size and v == 1:
        Tr, Fr = T[rest], F[rest]
        Br = Tr - Fr
        mid = Tr[:, 1:-1] if p > 2 else Tr[:, :1]
        closed = _uniform(mid) & (Tr[:, 0] <= mid[:, 0]) & (mid[:, 0] <= Tr[:, -1])
        k = rest[closed]
        out[k] = one_f_one_b(Fr[closed], Br[closed], m[k])
        k = rest[~closed]
        played = np.minimum(m[k], 4 * p)
        for pl in np.unique(played):
            s = k[played == pl]
            t = _played("1f1b", F[s][:, :, None], (T[s] - F[s])[:, :, None], int(pl))[0]
            out[s] = t + (m[s] - pl) * tmax[s]
    elif rest.size:
        Fc = F[rest][:, :, None] * shares[rest]
        Bc = (T[rest] - F[rest])[:, :, None] * bwd_shares[rest]
        mr = m[rest]
        small = mr <= 3 * p
        for mm in np.unique(mr[small]):
            s = np.flatnonzero(small & (mr == mm))
            out[rest[s]] = _played("interleaved", Fc[s], Bc[s], int(mm))[0]
        s = np.flatnonzero(~small)
        if s.size:
            t2, t3 = _played("interleaved", Fc[s], Bc[s], 2 * p, 3 * p)
            busiest = (Fc[s].sum(axis=2) + Bc[s].sum(axis=2)).max(axis=1)
            out[rest[s]] = t3 + (mr[s] // p - 3) * np.maximum(t3 - t2, p * busiest)
    return out + 2.0 * (p * v - 1) * send
