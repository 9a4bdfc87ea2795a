"""Memory per rank of each pipeline stage: weights, gradients, optimizer state, activations, temporaries.

Activation bytes per layer and micro-batch follow Korthikanti et al., 'Reducing Activation Recomputation in
Large Transformer Models' (MLSys'23), §4: s·b·h·(34 + 5·a·s/h) without parallelism; with tensor parallelism
s·b·h·(10 + 24/t + 5·a·s/(h·t)); with sequence parallelism s·b·h·(34/t + 5·a·s/(h·t)); selective recompute drops
the 5·a·s²·b term; full recompute keeps only the layer input, 2·s·b·h (/t with sequence parallelism).
We generalise the 34 term to GQA, SwiGLU and flash attention component by component (see `layer_activation_bytes`).
In-flight micro-batches: 1F1B stage i holds min(m, p − i) (Narayanan et al. SC'21 §2.2); interleaving raises
the first stage to p·(1 + (p − 1)/(p·v)) (Korthikanti §4.2.3) and every later stage to its Megatron warm-up depth.
Gradients: one buffer in the format the plan accumulates and reduces them in (4 bytes/param in fp32, 2 in fp16 or
bf16: workload.build.grad_bytes_per_param), sharded from ZeRO-2 on.
Optimizer state: ZeRO (Rajbhandari et al. SC'20) §5: K = 12 bytes/param for mixed-precision Adam (8 with 16-bit
moments: plan.optimizer_moments), sharded over
dp·cp (routed experts: over the expert-data-parallel group dp·cp/ep; `workload.build.zero_shards`).
"""
from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass

import numpy as np

from narrowpath.spec.plan import interleaved_warmup
from narrowpath.spec.scenario import Scenario
from narrowpath.workload import transformer as T
from narrowpath.workload.build import (embedding_params, grad_bytes_per_param, held_weight_bytes_per_param,
                                       layer_kind_of, optimizer_state_bytes_per_param,
                                       sharded_weight_bytes_per_param, weight_bytes_per_param, zero_shards)
from narrowpath.workload.items import Workload
from narrowpath.workload.loss import loss_temporary_bytes
from narrowpath.workload.split import mtp_recomputed, offload_fraction, plan_layer_ranges
from narrowpath.workload.recompute import kept_bytes

RUNTIME_RESERVE_BYTES = 2.0e9
"""CUDA context, cuBLAS/NCCL workspaces and allocator fragmentation, bytes (typical 1.5-3 GB on Hopper)."""


@dataclass(frozen=True, slots=True)
class MemoryBreakdown:
    """Bytes per rank of one pipeline stage, and the device capacity."""

    stage: int
    items: dict[str, float]
    """weights, gradients, optimizer_state, activations, temporaries, runtime_reserve."""
    capacity_bytes: float

    @property
    def total_bytes(self) -> float:
        return sum(self.items.values())

    @property
    def fits(self) -> bool:
        return self.total_bytes <= self.capacity_bytes

    @property
    def overflow_bytes(self) -> float:
        return max(0.0, self.total_bytes - self.capacity_bytes)

    @property
    def largest_item(self) -> str:
        return max(self.items, key=self.items.get)


def layer_activation_bytes(scn: Scenario, attention_kernel: str, *, moe_layer: bool = False,
                           window: bool = False) -> float:
    """Activation bytes one layer keeps for backward, per micro-batch, on one rank: the sum of what its forward ops
    keep (Op.saved_bytes; Korthikanti §4 generalised component by component). Selective recompute drops what its
    modules rebuild (the score-sized tensors of an unfused core by default: workload.recompute); full recompute
    keeps only the layer input."""
    m, p = scn.model, scn.plan
    A = T.act_bytes(p)
    E = p.mbs * (m.seq_len // p.cp) * m.hidden
    if p.recompute == "full":
        return A * E / (p.tp if p.sequence_parallel else 1)
    ops = T.layer_forward_ops(m, p, attention_kernel, moe_layer=moe_layer, window=window)
    return kept_bytes(ops, m, p)  # selective recompute drops what its modules rebuild (workload.recompute)


def in_flight_chunk_passes(stage: int, pp: int, vpp: int, num_microbatches: int, v_shape: bool = False,
                           group: int = 0) -> int:
    """Chunk forwards (1/vpp of the stage's layers each) stage `stage` has run when its first backward starts, the
    one in flight included: its warm-up depth + 1. 1F1B: min(m, p − s) (Narayanan et al. SC'21 §2.2). Megatron-LM's
    interleaved schedule: 2(p − s − 1) + (v − 1)·g warm-up chunk forwards for micro-batch groups of g (`group`,
    default p: Megatron-Core's `get_pp_rank_microbatches`), capped by the m·v chunk passes; with g = p stage 0
    holds p + (p − 1)/v micro-batches, Korthikanti's p·(1 + (p − 1)/(p·v)), the last stage still p − (p − 1)/v.
    DualPipeV (`v_shape`): 2p + 1 on every rank — 2p − s forwards of chunk 0 and s + 1 of chunk 1 at the start of
    its first F&B pair, for any m >= 2p, and no other moment holds more of either chunk, so it is the peak whatever
    the chunks' sizes (counted on schedule.sim.programs.order_dualpipev, a forward held until its whole or
    weight-gradient backward; tests/schedule/test_dualpipev.py); stage_memory weighs the two chunks apart."""
    p, v, m = pp, vpp, num_microbatches
    if p == 1:
        return 1
    if v_shape:
        return 2 * p + 1
    if v == 1:
        return min(m, p - stage)
    return interleaved_warmup(p, stage, v, group, m * v - 1) + 1


def chunk_held_counts(stage: int, pp: int, vpp: int, num_microbatches: int, v_shape: bool = False,
                      group: int = 0) -> tuple[tuple[int, ...], ...]:
    """Forwards of each chunk a stage holds, not yet freed by their backward, at each moment one of its forwards
    ends: the distinct count vectors, one entry per chunk. Their sum is `in_flight_chunk_passes` at every one of
    them; a stage whose chunks keep unequal bytes peaks at the one that weighs its heavier chunk most. Megatron-Core's
    interleaved order (schedule.sim.programs.order_interleaved, the simulator's program): virtual micro-batch k runs
    chunk c of `schedule_table` forward and chunk v − 1 − c backward, the steady state a forward then a backward after
    the warm-up — stage 0 of p 8, v 2 holds 15 forwards of chunk 0 and 8 of chunk 1 at its first backward, and
    16 / 7 two forwards later. DualPipeV: 2p − s of chunk 0 and s + 1 of chunk 1 (`in_flight_chunk_passes`); 1F1B:
    one chunk."""
    p, v, m = pp, vpp, num_microbatches
    if v_shape:
        return ((2 * p - stage, stage + 1),)
    total = in_flight_chunk_passes(stage, p, v, m, v_shape, group)
    if v == 1 or p == 1:
        return ((total,),)
    return _interleaved_held(p, v, m, total - 1, group or p)


@functools.lru_cache(maxsize=1024)
def _interleaved_held(p: int, v: int, m: int, warm: int, g: int) -> tuple[tuple[int, ...], ...]:
    """The moments that can hold the most of any per-chunk bytes. After steady forward j (schedule entry warm + j)
    the stage holds cf(warm + j + 1) − cb(j); between two changes of the chunk either sequence runs, the counts move
    linearly in j, so a peak of any weighted sum sits at a run's end; and a full group of micro-batches later the
    counts repeat (every chunk gained and lost g), so only the first two periods and the last ones (the partial
    group, the drain of the forwards) are looked at: O(v) moments, whatever m."""
    P, n = g * v, m * v - warm
    full = (m // g) * P  # schedule entries in whole groups

    def cf(k: np.ndarray) -> np.ndarray:  # forwards of each chunk among the first k schedule entries, (len(k), v)
        blocks = np.minimum(k // P, m // g)
        size, rest = np.minimum(g, m - blocks * g)[:, None], (k - blocks * P)[:, None]
        return blocks[:, None] * g + np.clip(rest - np.arange(v)[None, :] * size, 0, size)

    def runs(lo: int, hi: int) -> np.ndarray:  # entries in [lo, hi) where a run of one chunk starts
        blk = np.arange(max(0, lo // P), min(-(-hi // P), -(-m // g)))
        starts = (blk[:, None] * P + np.arange(v)[None, :] * np.minimum(g, m - blk * g)[:, None]).ravel()
        return starts[(starts >= lo) & (starts < hi)]

    tail = full - 2 * P - warm
    b = np.concatenate([runs(0, 2 * P + warm + 3), runs(max(0, tail - 3), m * v + 1)])
    j = np.concatenate([b - 2, b - 1, b, b - warm - 2, b - warm - 1, b - warm, [0, n - 1]])
    j = np.unique(j[(j >= 0) & (j < n) & ((j < 2 * P) | (j >= tail))])
    held = cf(warm + j + 1) - cf(j)[:, ::-1]
    return tuple(dict.fromkeys(map(tuple, held.tolist())))


def in_flight_microbatches(stage: int, scn: Scenario) -> float:
    """Micro-batches whose activations a stage holds at peak (1F1B / interleaved 1F1B): `in_flight_chunk_passes`
    in units of whole micro-batches."""
    p = scn.plan
    return in_flight_chunk_passes(stage, p.pp, p.vpp, p.num_microbatches, p.dualpipev, p.interleave_group) / p.vpp


def stage_memory(scn: Scenario, wl: Workload, attention_kernel: str) -> list[MemoryBreakdown]:
    """Memory per rank for every pipeline stage."""
    model, p = scn.model, scn.plan
    dev = scn.system.device
    Wg, G = sharded_weight_bytes_per_param(p), grad_bytes_per_param(p)
    Wb = weight_bytes_per_param(p.precision)
    A = T.act_bytes(p)
    lstm_layer = p.mbs * model.seq_len * model.hidden * 6 * A / p.tp
    # what a layer keeps when it is not fully recomputed (selective recompute still drops the score tensors)
    no_rc = dataclasses.replace(scn, plan=dataclasses.replace(
        p, recompute="selective" if p.recompute == "selective" else "none", recompute_layers=0))
    per_kind: dict[tuple[bool, bool], float] = {}
    b, s = p.mbs, model.seq_len // p.cp
    ranges = plan_layer_ranges(model, p) if model.arch == "transformer" else [[range(model.layers)]]
    layer_input = None  # what a fully recomputed layer keeps (its input), the same on every stage
    kind_of = layer_kind_of(model) if model.arch == "transformer" else ()
    out = []
    for st, rng in zip(wl.stages, ranges):
        zero = p.comm_zero_stage
        dense, expert = st.params - st.expert_params, st.expert_params

        def held(from_stage: int) -> float:
            """Parameters a rank keeps of this item: sharded once the ZeRO stage reaches `from_stage`."""
            if zero < from_stage:
                return st.params
            return dense / zero_shards(p) + expert / zero_shards(p, expert=True)

        # per chunk, what one micro-batch's forward leaves on this rank: a fully recomputed layer keeps only its input
        # — Megatron's block method re-runs the first recompute_layers layers of every chunk (all of them when 0), so
        # which layers those are matters where kinds differ (DeepSeek-V3's leading dense layers) — and its first
        # offload_layers layers keep theirs in host memory (Transformer Engine's offload context takes layers in the
        # order they run); the MTP layers sit in the output layer's chunk, offloaded in the chunk's share
        full = p.recompute == "full"
        if full and layer_input is None:
            layer_input = layer_activation_bytes(scn, attention_kernel)
        mtp_n = model.mtp_layers if st.index == p.head_stage else 0
        sizes = tuple(len(r) for r in rng)
        chunk_acts = []
        largest_layer = 0.0  # the largest layer of this stage: what a layer-sized temporary must hold
        for c, r in enumerate(rng):
            rerun = min(len(r), p.recompute_layers or len(r)) if full else 0
            off = min(len(r), p.offload_layers)  # its first layers' saved tensors in host memory (as they run)
            kept = 0.0
            for j, li in enumerate(r):
                a = lstm_layer
                if model.arch == "transformer":
                    kind = kind_of[li]
                    if kind not in per_kind:
                        per_kind[kind] = layer_activation_bytes(no_rc, attention_kernel, moe_layer=kind[0],
                                                                window=kind[1])
                    a = per_kind[kind]
                    largest_layer = max(largest_layer, a)
                if j >= off:
                    kept += layer_input if j < rerun else a
            if mtp_n and c == len(rng) - 1:  # inputs only under a full recompute of every layer: Megatron-Core skips
                # the block method for them (split.end_rerun_share)
                mtp = mtp_n * layer_activation_bytes(no_rc, attention_kernel, moe_layer=model.moe is not None)
                kept += (mtp_n * layer_input if mtp_recomputed(p) else mtp) * (1 - offload_fraction(p, (len(r),)))
            chunk_acts.append(kept)
        f_off = offload_fraction(p, sizes)
        # the linear layers' 16-bit weights and cached quantized copies (or FP8 primary weights alone), a ZeRO-3
        # shard in the format its all-gather moves; the embedding and output layer in 16 bit
        emb = embedding_params(scn, st.index == 0, st.index == p.head_stage) if model.arch == "transformer" else 0.0
        if zero < 3:
            weights = (st.params - emb) * held_weight_bytes_per_param(p, dev.fp8_any_layout) + emb * Wb
        else:
            emb_shard = emb / zero_shards(p)
            weights = (held(3) - emb_shard) * Wg + emb_shard * Wb
        grads = held(2) * G
        optim = held(1) * optimizer_state_bytes_per_param(p)
        n_layers = sum(len(r) for r in rng)
        if st.index == 0:  # the embedding output, held with chunk 0
            chunk_acts[0] += A * b * s * model.hidden / (p.tp if p.sequence_parallel else 1)
        # the most this stage's forwards not yet freed by their backwards weigh at any moment (chunk_held_counts)
        counts = chunk_held_counts(st.index, p.pp, p.vpp, p.num_microbatches, p.dualpipev, p.interleave_group)
        acts = max(sum(n * a for n, a in zip(cnt, chunk_acts)) for cnt in counts)
        temps = 0.0
        if f_off:  # the layers being copied out or fetched back: one in each direction
            temps += 2 * largest_layer
        if p.recompute == "full" and model.arch == "transformer":
            temps = max(temps, largest_layer)  # one layer re-materialised during its backward
        if st.index == p.head_stage:
            # the logits and, for Megatron's unfused loss, their FP32 softmax (torch autocast's log_softmax keeps one
            # FP32 tensor likewise; Transformer Engine's writes the gradient into the logits: workload.loss)
            temps = max(temps, loss_temporary_bytes(p.cross_entropy, b * s * model.vocab / p.tp, A))
        if zero == 3:
            per_layer_params = st.params / max(1, n_layers)
            temps += 2 * per_layer_params * Wg  # current + prefetched gathered layer
        # gradient buckets are views into the contiguous gradient buffer (Megatron DDP): no extra bytes
        items = {"weights": weights, "gradients": grads, "optimizer_state": optim, "activations": acts,
                 "temporaries": temps, "runtime_reserve": RUNTIME_RESERVE_BYTES}
        out.append(MemoryBreakdown(st.index, items, dev.hbm.capacity_bytes))
    return dualpipe_rank_memory(out) if p.dualpipe else out


def dualpipe_rank_memory(stages: list[MemoryBreakdown]) -> list[MemoryBreakdown]:
    """DualPipe (DeepSeek-V3 §3.2.1, Table 2): rank i holds stage i and stage p − 1 − i — two copies of the
    parameters in all (Table 2's 2× parameters), so each rank keeps its two stages' weights, gradients and optimizer
    state, each copy ZeRO-sharded within its own data-parallel group as a 1F1B stage is (deepseek-ai/DualPipe sums
    the twin copies' gradients and steps each copy; sharding over both copies' ranks would be a saving it does not
    make) — and at its peak still holds p − s micro-batches of every stage s it runs, as 1F1B's stage s does (played
    on the program: rank i holds p − i forwards of direction 0 and i + 1 of direction 1 at once, the report's PP + 1;
    tests/schedule/test_dualpipe.py). Temporaries: the larger of the two stages' (a merged F&B pair may hold both:
    left out); one runtime reserve."""
    p = len(stages)
    out = []
    for i in range(p):
        a, b = stages[i].items, stages[p - 1 - i].items
        both = {k: a[k] + b[k] for k in a}
        both["temporaries"] = max(a["temporaries"], b["temporaries"])
        both["runtime_reserve"] = a["runtime_reserve"]
        out.append(MemoryBreakdown(i, both, stages[i].capacity_bytes))
    return out
