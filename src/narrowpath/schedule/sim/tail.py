"""The end of a step, after each stage's last pass: gradient sync, tied embeddings, the global barrier, optimizer,
parameter all-gather.

- Gradient all-reduce / reduce-scatter over the data-parallel group, in buckets (`plan.bucket_bytes`). With
  `dp_overlap` a chunk's buckets become ready one after another while the pass that completes its gradients runs
  (its last backward; W under zero-bubble), in the order the program finishes the chunks; the data-parallel
  stream takes them in that order, each bucket starting when the last member of its group has it ready and the
  stream is free. Without overlap the whole sync starts at the group's last arrival. A bucket costs the whole
  transfer's price × its share of the bytes (the closed form's convention: one priced collective, the last
  bucket is total / buckets). Hidden seconds slow the compute they ran beside by `overlap_compute_slowdown`.
- Tied-embedding all-reduce between stage 0 and the last stage (unit u with unit u), exposed.
- The optimizer's gradient-norm all-reduce spans every GPU: a global barrier; then the optimizer update (the most
  loaded stage's, as `predict`), then the ZeRO parameter all-gather, overlapped with the next step's first
  forward exactly as `predict` prices it (`exposed_after_bucketed_overlap`) — not event-simulated.
"""
from __future__ import annotations

import numpy as np

from narrowpath.schedule.sim.engine import StageState, StepEngine
from narrowpath.schedule.sim.work import StepTransfer, num_buckets
from narrowpath.schedule.step import exposed_after_bucketed_overlap


def _gmax(vals: np.ndarray, g: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """Max over each group along the last axis → (values broadcast to members, index of the member that won)."""
    if g is None:
        return vals, np.broadcast_to(np.arange(vals.shape[-1]), vals.shape)
    sub = vals[..., g]
    arg = sub.argmax(axis=-1)
    mx = np.take_along_axis(sub, arg[..., None], axis=-1)[..., 0]
    src = np.take_along_axis(np.broadcast_to(g, sub.shape), arg[..., None], axis=-1)[..., 0]
    out = np.empty_like(vals)
    out[..., g] = mx[..., None]
    winner = np.empty(vals.shape, dtype=np.int64)
    winner[..., g] = src[..., None]
    return out, winner


def grad_sync(eng: StepEngine, i: int, st: StageState, tr: StepTransfer, bucket_bytes: float) -> None:
    """Advance stage i's units past one gradient sync (module docstring)."""
    g = eng.group(tr.axis)
    E, cz = st.clock, st.cause
    pert = eng.pert
    if tr.overlappable and st.last_bwd:
        shares = eng.work.stages[i].chunk_param_share
        starts, ends, causes, frac, cost = [], [], [], [], []
        for c in eng.chunk_order[i]:
            s0, s1, scz = st.last_bwd.get(c, (E, E, cz))  # not launched by a pass: at the stage's end
            nbytes = tr.message_bytes * shares[c]
            n = num_buckets(nbytes, bucket_bytes)
            cum = np.minimum(np.arange(1, n + 1) * bucket_bytes, nbytes)
            sizes = np.diff(np.concatenate([[0.0], cum]))
            for k in range(n):
                starts.append(s0)
                ends.append(s1)
                causes.append(scz)
                frac.append(cum[k] / nbytes if nbytes > 0 else 1.0)
                cost.append(tr.cost_s * sizes[k] / tr.message_bytes if tr.message_bytes > 0 else 0.0)
        S0, S1 = np.array(starts), np.array(ends)
        ready = S0 + np.array(frac)[:, None] * (S1 - S0)
        suffix = np.cumsum(np.array(cost)[::-1])[::-1]
        rg, win = _gmax(ready, g)
        val = rg + suffix[:, None]
        kbest = val.argmax(axis=0)
        cols = np.arange(eng.units)
        f_end = val[kbest, cols]
        if cz is not None:
            src_unit = win[kbest, cols]
            chain_cz = np.stack([causes[k][:, u] for k, u in zip(kbest, src_unit)], axis=1)
    else:
        start, win = _gmax(E, g)
        f_end = start + tr.cost_s
        if cz is not None:
            chain_cz = cz[:, win]
    if pert is not None:
        f_end = f_end + _link_extras(eng, i, tr, g, f_end - tr.cost_s, chain_cz)
    exposed = np.maximum(0.0, f_end - E)
    hidden = np.maximum(0.0, tr.cost_s - exposed) if tr.overlappable else 0.0
    later = f_end > E
    st.clock = np.maximum(E, f_end) + eng.work.slowdown * hidden
    if cz is not None:
        st.cause = np.where(later[None, :], chain_cz, cz)
    eng.waits[f"dp gradient sync ({tr.name})"] += float(exposed.mean()) / eng.p
    if eng.recorder is not None:
        eng.recorder.step_transfer(i, tr, f_end - tr.cost_s + eng.t0, f_end + eng.t0)


def _link_extras(eng: StepEngine, i: int, tr: StepTransfer, g, start: np.ndarray, cz) -> np.ndarray:
    pert = eng.pert
    extra = np.zeros(eng.units)
    for tier in tr.tiers:
        frac = pert.slow_link.get(tier)
        if frac is not None:
            f = _gmax(frac[i], g)[0]
            e = f * max(0.0, tr.cost_s - tr.latency_s)
            extra += e
            cz[eng.ci["slow-link"]] += e
        at = pert.flap_at.get(tier)
        if at is not None:
            hit_unit = at[i] <= start
            if hit_unit.any():
                hit = _gmax(hit_unit.astype(float), g)[0] > 0
                at[i][hit_unit] = np.inf
                e = hit * pert.flap_penalty[tier]
                extra += e
                cz[eng.ci["link-flap"]] += e
    return extra


def step_tail(eng: StepEngine, states: list[StageState], rng: np.random.Generator, bucket_bytes: float
              ) -> tuple[np.ndarray, np.ndarray | None, list[tuple[int, int]], np.ndarray]:
    """Per step of the batch: (step end, cause vector of the unit that finished the step (C, steps), (stage,
    unit) that arrived last at the barrier, its lead over the median arrival) — times from the steps' start."""
    work = eng.work
    ag_exposed = 0.0
    for i, st in enumerate(states):
        for tr in work.stages[i].step_transfers:
            if tr.axis in ("dp", "edp") and tr.op in ("all_reduce", "reduce_scatter"):
                grad_sync(eng, i, st, tr, bucket_bytes)
            elif tr.op == "all_gather":
                ag = exposed_after_bucketed_overlap(tr.cost_s, tr.message_bytes, bucket_bytes,
                                                    work.stages[i].fwd_compute_s, work.slowdown) \
                    if tr.overlappable else tr.cost_s
                ag_exposed = max(ag_exposed, ag)
    if eng.p > 1:
        first, last = states[0], states[-1]
        for tr in (tr for tr in work.stages[0].step_transfers if tr.axis == "pp_ends"):
            t = np.maximum(first.clock, last.clock)
            if first.cause is not None:
                cz = np.where((first.clock >= last.clock)[None, :], first.cause, last.cause)
                first.cause = last.cause = cz
            first.clock = last.clock = t + tr.cost_s
    S, U = eng.batch, eng.unit1
    ends = np.stack([st.clock for st in states]).reshape(eng.p, S, U).transpose(1, 0, 2).reshape(S, -1)
    flat = ends.argmax(axis=1)
    barrier = ends.max(axis=1)
    lead = barrier - np.median(ends, axis=1)
    eng.waits["step barrier (gradient-norm all-reduce)"] += float((barrier[:, None] - ends).mean())
    who = [divmod(int(f), U) for f in flat]
    cz = None
    if states[0].cause is not None:
        cz = np.stack([states[st].cause[:, s * U + u] for s, (st, u) in enumerate(who)], axis=1)
    opt = np.full((eng.p, eng.units), work.optimizer_s)
    pert = eng.pert
    if pert is not None:
        base = opt
        if eng.kernel is not None:
            base = base + work.optimizer_s * (eng.kernel.factor(rng, work.optimizer_kernels, opt.shape) - 1.0)
        jit = base - work.optimizer_s
        if pert.factor is not None:
            base = base * pert.factor
        opt = base
        o = opt.reshape(eng.p, S, U).transpose(1, 0, 2).reshape(S, -1)
        j = o.argmax(axis=1)
        if cz is not None:
            jj = jit.reshape(eng.p, S, U).transpose(1, 0, 2).reshape(S, -1)[np.arange(S), j]
            if eng.kernel is not None:
                cz[eng.ci["jitter"]] += jj
            if pert.factor is not None:
                lab = pert.slow_label.reshape(eng.p, S, U).transpose(1, 0, 2).reshape(S, -1)[np.arange(S), j]
                cz[lab, np.arange(S)] += o[np.arange(S), j] - work.optimizer_s - jj
        opt_max = o.max(axis=1)
    else:
        opt_max = np.full(S, work.optimizer_s)
    end = barrier + opt_max + ag_exposed
    if eng.recorder is not None:
        eng.recorder.tail(float(barrier[0]) + eng.t0, float(barrier[0] + opt_max[0]) + eng.t0, float(end[0]) + eng.t0)
    return end, cz, who, lead
