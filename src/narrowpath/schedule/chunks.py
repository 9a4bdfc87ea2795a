"""Each interleaved chunk's share of its stage's forward and backward pass (the closed form, `schedule.step`).

A stage's chunks need not be alike: DeepSeek-V3's first three layers are dense and the other 58 MoE (their grouped
GEMMs, their host synchronisation, their expert all-to-all); the first stage's first chunk holds the embedding and
the head stage's last chunk the output layer, its loss and the multi-token-prediction modules with their exchanges.
The event simulator prices every chunk from its own items (`schedule.sim.work.chunk_items`) and is the reference.
The closed form keeps each stage's priced forward and backward times (its pooled overlap, host waits and the
slowdown of overlapped compute) and splits each over the stage's chunks in proportion to what the chunk's own items
cost: its layers of each kind at that kind's per-layer time, the ends at theirs, every transfer at the share of its
pass's traffic the stage leaves exposed, and the forward and the backward apart (an output layer's backward is twice
its forward; a dense layer's exchange is not an MoE layer's). Pure functions over priced items.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

from narrowpath.workload import transformer as T
from narrowpath.workload.build import end_params, layer_kind_of
from narrowpath.workload.split import block_recompute, end_rerun_share, plan_layer_ranges, rerun_layers
from narrowpath.schedule.exposure import bucket_tail_s

_PHASES = ("fwd", "bwd", "recompute")
_EQUAL = 1e-9
"""Shares within this of each other count as equal (the closed form then needs none)."""


def exposed_shares(rows) -> tuple[float, float]:
    """(forward, backward) share of a stage's per-micro-batch traffic that it leaves exposed, over its priced rows
    (transfer, count, cost, exposed seconds)."""
    total, exposed = [0.0, 0.0], [0.0, 0.0]
    for tr, c, cost, exp in rows:
        if tr.phase not in _PHASES:
            continue
        i = 0 if tr.phase == "fwd" else 1
        total[i] += cost.time_s * c
        exposed[i] += exp
    return tuple(e / t if t > 0 else 0.0 for e, t in zip(exposed, total))


def phase_times(ops, xfs, t_op: Callable, transfer_s: Callable) -> tuple[tuple[float, ...], ...]:
    """(GPU time, host time, host synchronisations, transfer time), each per phase (fwd, bwd, recompute), of some
    items: `t_op(op)` → (GPU time, host time) of one execution, `transfer_s(tr)` one transfer."""
    out = [dict.fromkeys(_PHASES, 0.0) for _ in range(4)]
    for op, c in ops:
        if op.phase in out[0]:
            gpu, host = t_op(op)
            out[0][op.phase] += gpu * c
            out[1][op.phase] += host * c
            out[2][op.phase] += op.host_syncs * c
    for tr, c in xfs:
        if tr.phase in out[3]:
            out[3][tr.phase] += transfer_s(tr) * c
    return tuple(tuple(d[p] for p in _PHASES) for d in out)


def pass_cost(times, exposed: tuple[float, float], host_sync_s: float) -> tuple[float, float, float]:
    """(forward, backward, recompute) cost of items with `phase_times` → times: each phase at the slower of the
    GPU's and the host's pace with its host synchronisations (as a stage's passes are priced), the transfers at the
    stage's exposed shares (the recompute runs in the backward pass: its exposed share)."""
    gpu, host, syncs, comm = times
    c = [max(g, h) + n * host_sync_s for g, h, n in zip(gpu, host, syncs)]
    return c[0] + exposed[0] * comm[0], c[1] + exposed[1] * comm[1], c[2] + exposed[1] * comm[2]


def chunk_shares(scn, layer_times: dict, end_times: tuple, exposed: Sequence[tuple[float, float]],
                 host_sync_s: float) -> tuple[list[list[float]], list[list[float]]] | None:
    """(forward, backward) share of each stage's pass each of its chunks takes, from `layer_times` (layer kind →
    `phase_times` of one layer of that kind), `end_times` (`phase_times` of the embedding end's and of the output
    end's items) and each stage's `exposed_shares`; the embedding sits in the first stage's first chunk and the
    output end in the head stage's last (DualPipeV: rank 0's second arm). None when every stage's chunks come out
    equal in both passes (the closed form then needs no shares)."""
    model, plan = scn.model, scn.plan
    kind_of = layer_kind_of(model)
    kinds = sorted(set(kind_of))
    prefix = {k: [0] for k in kinds}  # layers of each kind before layer i: a chunk's count is a difference
    for kind in kind_of:
        for k in kinds:
            prefix[k].append(prefix[k][-1] + (k == kind))
    block = block_recompute(plan)  # a block recompute re-runs each chunk's first layers
    fwd_w, bwd_w = [], []
    memo: dict = {}  # stages alike (the middle ones: same chunks, same exposure) are priced once
    for s, ranges in enumerate(plan_layer_ranges(model, plan)):
        chunks = tuple(tuple((k, prefix[k][r.stop] - prefix[k][r.start]) for k in kinds) for r in ranges)
        # the layers each chunk's recompute runs in (its first recompute_layers under the block method)
        rerun = chunks if not block else tuple(
            tuple((k, prefix[k][r.start + rerun_layers(plan, len(r))] - prefix[k][r.start]) for k in kinds)
            for r in ranges)
        key = (chunks, rerun, exposed[s], s == 0, s == plan.head_stage)
        if key not in memo:
            per_kind = {k: pass_cost(t, exposed[s], host_sync_s) for k, t in layer_times.items()}
            raw = [[sum(n * per_kind[k][0] for k, n in c),
                    sum(n * per_kind[k][1] for k, n in c) + sum(n * per_kind[k][2] for k, n in rc)]
                   for c, rc in zip(chunks, rerun)]
            ends = ((end_times[0], 0 if s == 0 else None), (end_times[1], -1 if s == plan.head_stage else None))
            f_end = end_rerun_share(plan)  # the MTP modules' recompute (none under the block method)
            for end, at in ends:
                if at is not None:
                    ef, eb, er = pass_cost(end, exposed[s], host_sync_s)
                    raw[at][0] += ef
                    raw[at][1] += eb + f_end * er
            memo[key] = tuple([x[i] / total if total > 0 else 1.0 / len(raw) for x in raw]
                              for i, total in ((0, sum(x[0] for x in raw)), (1, sum(x[1] for x in raw))))
        fwd_w.append(memo[key][0])
        bwd_w.append(memo[key][1])
    if all(max(w) - min(w) <= _EQUAL for w in fwd_w + bwd_w):
        return None
    return fwd_w, bwd_w


def chunk_param_shares(scn, stage: int, ranges) -> list[float]:
    """Each chunk's share of its stage's parameters (its layers', and the embedding's or the output layer's and the
    multi-token-prediction modules' where they sit): the share of the stage's gradient sync its buckets carry."""
    model, plan = scn.model, scn.plan
    if model.arch != "transformer" or len(ranges) == 1:
        return [1.0]
    per_kind: dict[bool, float] = {}
    out = []
    for j, r in enumerate(ranges):
        p = 0.0
        for li in r:
            moe = model.is_moe_layer(li)
            if moe not in per_kind:
                per_kind[moe] = T.layer_params(model, plan, moe_layer=moe)
            p += per_kind[moe]
        p += end_params(scn, j == 0 and stage == 0, j == len(ranges) - 1 and stage == plan.head_stage)[0]
        out.append(p)
    s = sum(out)
    return [p / s for p in out] if s > 0 else [1.0 / len(out)] * len(out)


def sync_launch_mode(plan, schedule: str) -> str:
    """How the overlapped gradient sync's buckets are launched on this plan's program (`Plan.grad_sync_launch`):
    `hooks` (each bucket as the backward makes it ready, every rank and chunk), `megatron` or `aligned`. The last
    two are Megatron-Core's DDP on its pipelined schedules (1F1B, interleaved; pp > 1). Its DDP splits only pipeline
    rank 0's first chunk into buckets (`distributed_data_parallel.py`: no bucketing on a rank > 0, and Megatron-LM
    wraps chunks > 0 with `disable_bucketing`), so under `megatron` (--no-align-grad-reduce) every other chunk goes
    out whole once its last backward is done. Under `aligned` (`config.grad_sync_func` = each chunk's
    `start_grad_sync`: Megatron-LM `training.py`, Megatron-Bridge `training/setup.py`) the interleaved schedule
    keeps the hooks off and launches chunk c whole on rank r once the backward r virtual micro-batches past c's last
    one is done (`backward_step_helper_postprocess`: "we launch asynchronous communication at the same time across
    the pipeline-parallel group"), the rest after the last backward; 1F1B lets rank 0's hooks stream during its
    last backward and launches the other ranks' after their cool-down ("Other pipeline stages do grad reduction
    during pipeline bubble"). Without a pipeline (`forward_backward_no_pipelining`: one rank, one chunk, its
    buckets as ready) and on DualPipe(V) or zero-bubble programs it is `hooks`."""
    if plan.dp_overlap and plan.pp > 1 and schedule in ("1f1b", "interleaved", "interleaved-1f1b"):
        return plan.grad_sync_launch
    return "hooks"


def chunk_streams(mode: str, chunks: int) -> list[bool] | None:
    """Which of a stage's chunks release their buckets one by one during their last backward, priced at rank 0
    (`chunked_sync_exposed_s`): all (`hooks`, None), the first only (`megatron`: rank 0's first chunk is the only
    one in buckets) or none (`aligned`: each chunk launched whole after a backward)."""
    if mode == "hooks":
        return None
    return [mode == "megatron" and c == 0 for c in range(chunks)]


def chunked_sync_exposed_s(total_s: float, message_bytes: float, bucket_bytes: float, shares: Sequence[float],
                           bwd_s: Sequence[float], last_group: int, slowdown: float,
                           streams: Sequence[bool] | None = None, first_window_s: float | None = None) -> float:
    """Exposed time of an interleaved stage's overlapped gradient sync (Megatron-Core --overlap-grad-reduce, one
    bucket group per model chunk): chunk c's buckets (its `shares` of the bytes, buckets of `bucket_bytes`) become
    ready during its last backward (`bwd_s[c]`), and the cool-down runs those last backwards chunk v − 1 first,
    then the last micro-batch group's (`last_group`: p with Megatron-Core's default groups, Plan.interleave_last_group)
    backwards of each lower chunk, chunk 0 last (Megatron-Core's interleaved program), so chunk k's last backward
    ends Σ_{c<k} last_group·bwd_s[c] before the stage's (bubbles only add to that). The stream takes the buckets
    in that order; after the stage's last backward it still has, for each k, the larger of chunk k's last bucket
    and what of chunk k its own last backward cannot hide, plus every later chunk's, less the time since chunk
    k's last backward — the most of these (with one chunk: `exposed_after_bucketed_overlap` over one backward).
    `streams[k]` False (`chunk_streams`: Megatron-Core's DDP): chunk k goes out whole once its last backward is
    done, so none of it hides behind that backward. The stage's timeline is taken as rank 0's, whose end is the
    step's: under `aligned` another rank launches chunk k ≥ 1 r backwards later but ends r backwards earlier, and
    its chunk 0 at its own end; under `megatron` another rank's chunk 0 goes out whole at its end, beside the
    chunk-0 backwards of the ranks below, so a streaming chunk 0 hides behind `first_window_s` at most (rank 0's
    last chunk-0 backward; default its own). The hidden part slows the compute it runs beside. The event simulator
    (`schedule.sim.tail`) is the reference."""
    exposed, later = 0.0, 0.0
    gap = [0.0]
    for c in range(len(shares)):
        gap.append(gap[-1] + last_group * bwd_s[c])
    for k in range(len(shares)):
        d = total_s * shares[k]
        n = max(1.0, message_bytes * shares[k] / bucket_bytes) if bucket_bytes > 0 else 1.0
        window = first_window_s if k == 0 and first_window_s is not None else bwd_s[k]
        streamed = streams is None or streams[k]
        exposed = max(exposed, (bucket_tail_s(d, n, window) if streamed else d) + later - gap[k])
        later += d
    exposed = min(total_s, max(0.0, exposed))
    return exposed + slowdown * (total_s - exposed)
