"""Closed-form pipeline schedules.

1F1B (PipeDream-Flush; Narayanan et al. SC'21 §2.2.1): with m micro-batches on p stages of per-micro-batch
time T (forward + backward), the step takes (m + p − 1)·T; the bubble fraction is (p − 1)/m.
Interleaved 1F1B with v chunks per stage (§2.2.2): the bubble shrinks to (p − 1)·T/v.

Unequal stages (embedding on the first, output layer and loss on the last, an uneven layer split) do not simply
run "at the slowest stage's pace plus a mean fill": the step event simulator (`schedule.sim`, the reference for
how schedules compose) plays Megatron's programs exactly, and these forms follow it:
- 1F1B: the step is the longest of p paths, one per candidate bottleneck stage b: micro-batch 0 reaches b's first
  backward (its forward through every stage and its backward back to b + 1, or b's own warm-up forwards if
  later), b then works without pause through its remaining passes, and the last gradient returns through the
  stages before b (`one_f_one_b_time_s`). Equal to the simulator for imbalance at the ends of the pipeline and
  for uneven layer splits; within 2.5 % of it for random per-stage imbalance (tests/schedule/test_pipeline.py).
- Interleaved: with unequal stages or chunks the steady state is slower than the busiest stage (a stage's
  forward and backward chunks pair differently from its neighbours', so they wait for each other), so the
  Megatron-Core program is evaluated exactly as max-plus dataflow (`interleaved_time_s`); the time is affine in
  the number of p-micro-batch groups from the second group on, so at most 3p micro-batches are evaluated and
  the rest extrapolated.
Equal stages keep Narayanan's forms.
"""
from __future__ import annotations

from functools import lru_cache

_REL_EQUAL = 1e-12


def _uniform(values: list[float]) -> bool:
    lo, hi = min(values), max(values)
    return hi - lo <= _REL_EQUAL * max(abs(hi), 1e-300)


def pipeline_time_s(stage_times_s: list[float], num_microbatches: int, vpp: int = 1, *,
                    fwd_times_s: list[float] | None = None,
                    chunk_weights: list[list[float]] | None = None) -> float:
    """Time of the pipelined forward/backward part of one step.

    `fwd_times_s`: each stage's forward part of its per-micro-batch time (default a third: backward = 2×
    forward); only unequal stages need it. `chunk_weights`: per stage, the share of its time each of its vpp
    chunks takes (default equal)."""
    p = len(stage_times_s)
    m = num_microbatches
    t_max = max(stage_times_s)
    if p == 1:
        return m * t_max
    equal_chunks = chunk_weights is None or all(_uniform(list(w)) for w in chunk_weights)
    if (_uniform(list(stage_times_s)) and equal_chunks) or (vpp > 1 and m % p):
        # equal stages; or an interleaved split Megatron-LM refuses (m not divisible by p): Narayanan's form
        t_mean = sum(stage_times_s) / p
        return m * t_max + (p - 1) * t_mean / vpp
    fwd = fwd_times_s or [t / 3.0 for t in stage_times_s]
    if vpp == 1:
        return one_f_one_b_time_s(fwd, [t - f for t, f in zip(stage_times_s, fwd)], m)
    weights = chunk_weights or [[1.0 / vpp] * vpp for _ in range(p)]
    return interleaved_time_s([[f * w for w in ws] for f, ws in zip(fwd, weights)],
                              [[(t - f) * w for w in ws] for t, f, ws in zip(stage_times_s, fwd, weights)], m)


def bubble_time_s(stage_times_s: list[float], num_microbatches: int, vpp: int = 1, **kw) -> float:
    """Idle time of the busiest stage: the pipeline time minus its own work."""
    return pipeline_time_s(stage_times_s, num_microbatches, vpp, **kw) - num_microbatches * max(stage_times_s)


def bubble_fraction(pp: int, num_microbatches: int, vpp: int = 1) -> float:
    """Narayanan et al. SC'21: (p − 1)/(v·m), bubble time over ideal time."""
    return (pp - 1) / (vpp * num_microbatches)


def one_f_one_b_time_s(fwd_s: list[float], bwd_s: list[float], m: int) -> float:
    """1F1B with per-stage forward and backward times (module docstring): max over bottleneck stages b of
    max(ΣF + Σ_{i>b} B_i, Σ_{i<b} F_i + (w_b + 1)·F_b) + (b's remaining passes) + Σ_{i<b} B_i,
    with w_b = min(p − b − 1, m) warm-up forwards (Megatron-LM's order)."""
    p = len(fwd_s)
    total_f = sum(fwd_s)
    best = 0.0
    f_before = b_before = 0.0
    b_after = sum(bwd_s)
    for b in range(p):
        b_after -= bwd_s[b]
        w = min(p - b - 1, m)
        ahead = min(w + 1, m)
        reach = max(total_f + b_after, f_before + ahead * fwd_s[b])
        rest = m * bwd_s[b] + (m - ahead) * fwd_s[b]
        best = max(best, reach + rest + b_before)
        f_before += fwd_s[b]
        b_before += bwd_s[b]
    return best


@lru_cache(maxsize=32)
def _interleaved_plan(p: int, v: int, m: int) -> tuple[tuple, int]:
    """Flat evaluation order of the Megatron-Core interleaved program: (stage, kind, chunk, own previous op,
    producing op) per op, in an order where every op follows its dependencies; op ids index one flat list."""
    table = []
    for lo in range(0, m, p):
        table += [(mb, c) for c in range(v) for mb in range(lo, min(lo + p, m))]
    total = m * v
    progs = []
    for i in range(p):
        w = min((p - i - 1) * 2 + (v - 1) * p, total)
        prog = [(0, table[k][1], table[k][0]) for k in range(w)]
        for k in range(total - w):
            prog += [(0, table[w + k][1], table[w + k][0]), (1, v - 1 - table[k][1], table[k][0])]
        prog += [(1, v - 1 - table[k][1], table[k][0]) for k in range(total - w, total)]
        progs.append(prog)
    ident = {}
    for i, prog in enumerate(progs):
        for j, op in enumerate(prog):
            ident[(i,) + op] = len(ident)
    order, pcs, placed = [], [0] * p, set()
    while len(order) < len(ident):
        moved = False
        for i, prog in enumerate(progs):
            while pcs[i] < len(prog):
                kind, c, mb = prog[pcs[i]]
                if kind == 0:
                    src = (i - 1, c) if i > 0 else (p - 1, c - 1)
                    dep = ident[(src[0], 0, src[1], mb)] if src[1] >= 0 else -1
                else:
                    src = (i + 1, c) if i < p - 1 else (0, c + 1)
                    dep = ident[(src[0], 1, src[1], mb)] if src[1] < v else ident[(i, 0, c, mb)]
                if dep >= 0 and dep not in placed:
                    break
                me = ident[(i, kind, c, mb)]
                prev = ident[(i,) + prog[pcs[i] - 1]] if pcs[i] else -1
                order.append((i, kind, c, prev, dep, me))
                placed.add(me)
                pcs[i] += 1
                moved = True
        if not moved:
            raise RuntimeError(f"interleaved program for p={p}, v={v}, m={m} deadlocks")
    return tuple(order), len(ident)


def _interleaved_exact(fwd: list[list[float]], bwd: list[list[float]], m: int) -> float:
    p, v = len(fwd), len(fwd[0])
    order, n = _interleaved_plan(p, v, m)
    end = [0.0] * n
    dur = (fwd, bwd)
    for i, kind, c, prev, dep, me in order:
        t = end[prev] if prev >= 0 else 0.0
        if dep >= 0 and end[dep] > t:
            t = end[dep]
        end[me] = t + dur[kind][i][c]
    return max(end)


def interleaved_time_s(fwd_s: list[list[float]], bwd_s: list[list[float]], m: int) -> float:
    """Interleaved 1F1B (Megatron-Core `forward_backward_pipelining_with_interleaving`, micro-batches in groups of
    p per chunk) with per-stage, per-chunk forward and backward times, by exact evaluation; m > 3p micro-batches
    extrapolate linearly from 2p and 3p (module docstring). Needs m divisible by p, as Megatron-LM does."""
    p = len(fwd_s)
    if m <= 3 * p:
        return _interleaved_exact(fwd_s, bwd_s, m)
    t2, t3 = _interleaved_exact(fwd_s, bwd_s, 2 * p), _interleaved_exact(fwd_s, bwd_s, 3 * p)
    return t3 + (m // p - 3) * (t3 - t2)
