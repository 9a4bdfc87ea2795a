"""Work items: what must happen on a rank — Ops (compute), Transfers (communication), Residency (data at rest).

No timing here; the cost stage prices these.
"""
from __future__ import annotations

from dataclasses import dataclass, field

PHASES = ("fwd", "bwd", "recompute", "optimizer")


@dataclass(frozen=True, slots=True)
class Op:
    """One kernel-level operation as executed on one rank, for one micro-batch of one layer (or once per step)."""

    name: str
    """Operator id, e.g. `qkv`, `attn_scores`, `softmax`, `mlp_up`, `ln1`, `logits`, `adam`."""
    kind: str
    """`matrix` (tensor-core GEMM), `flash` (fused attention kernel), or `vector` (element-wise/bandwidth-bound)."""
    phase: str
    """`fwd`, `bwd`, `recompute` (forward re-run during backward) or `optimizer`."""
    flop: float
    """FLOPs per execution (multiply-add = 2)."""
    hbm_bytes: float
    """Bytes read + written at HBM per execution (weights, activations in and out)."""
    dtype: str
    """Dtype of the arithmetic (`bf16`, `fp16`, `fp8`, `fp32`)."""
    kernels: int = 1
    """Kernel launches per execution."""
    weight_bytes: float = 0.0
    """Part of hbm_bytes that is weights (re-read every execution unless they persist nearer)."""
    model_flop: float | None = None
    """Useful FLOPs in the model-FLOPs convention (None = `flop`); e.g. causal flash executes ~half of it."""
    groups: int = 1
    """Independent equal GEMMs in one grouped kernel (MoE: the experts a rank holds, each with its own weights and
    its share of the tokens); the size-dependent efficiency sees one group's FLOPs."""
    saved_bytes: float = 0.0
    """Bytes a forward execution keeps for its backward (the activation memory it is responsible for)."""
    grad_elements: float = 0.0
    """Output-gradient elements a low-precision GEMM quantizes in backward (m·n; 0 for 16/32-bit GEMMs)."""
    grad_gathered: float = 0.0
    """Output-gradient elements all-gathered after that quantization (a row-parallel layer's m·n under sequence
    parallelism; 0 when not gathered): a per-tensor FP8 gradient is transposed after the gather, over all of them."""
    transpose_bytes: float = 0.0
    """Part of hbm_bytes that writes Transformer Engine's transposed (column-wise) FP8 copy, which a device whose
    FP8 GEMMs take any layout does not write (Device.fp8_any_layout; cost.roofline.hbm_bytes)."""
    host_kernels: int | None = None
    """Kernels the framework issues from the host per execution (None = `kernels`); 0 for kernels a library
    launches internally (cuDNN's RNN loop over time steps)."""
    host_syncs: int = 0
    """Times per execution the host waits for the GPU before it can issue more work (a dropless MoE layer copies its
    tokens-per-expert counts to the host to size the all-to-all and the grouped GEMMs)."""
    rows: float = 0.0
    """Rows (tokens) of one group's left operand of a GEMM built with its shape (workload.ops.gemm); 0 when not
    known. cost.roofline prices a GEMM of fewer rows than one MMA tile as a weight stream."""
    exps: float = 0.0
    """Exponentials per execution on the special-function units: a fused attention kernel's one per score it
    computes (forward: the softmax; backward: P recomputed from the saved log-sum-exp). cost.roofline bounds the
    kernel by them on a device that rates them (Device.peak_exp_per_s)."""
    head_dim: float = 0.0
    """Query-key head width of a fused (flash) attention kernel — its tiles' depth; cost.roofline rates the kernel by
    it (`flash_head_dim_rate`). 0: not a tiled attention kernel, or one the head-width measurements do not cover."""
    bwd_bytes: float | None = None
    """HBM bytes of this element-wise op's backward where the source's autograd graph gives them; None: twice the
    forward's (workload.ops `_backward`)."""
    bwd_kernels: int | None = None
    """Kernel launches of that backward; None: as many as the forward's (at least one)."""
    l2_bytes: float = 0.0
    """Bytes the kernel reads through L2 per execution where that, not HBM, can bound it: a decode attention kernel
    that gives each query head its own thread block (masked multi-head attention) reads a kv head's cache once per
    query head of its group — the group's blocks run together, so the first read fills L2 from HBM (`hbm_bytes`
    counts it once) and all of them stream it from L2 (cost.roofline.memory_time_s). 0: L2 never bounds it."""
    impl: str = ""
    """Which implementation a flash kernel is: `` the device's fused attention kernel (cuDNN / FlashAttention-3 on
    Hopper, the calibration's `flash_efficiency`), `fa2` FlashAttention-2 (plan.attention `flash2`; priced at
    Device.flash2_rate of the fused kernel)."""

    @property
    def useful_flop(self) -> float:
        return self.flop if self.model_flop is None else self.model_flop


@dataclass(frozen=True, slots=True)
class Transfer:
    """One communication pattern on one rank."""

    name: str
    """What it carries, e.g. `tp.attn_out`, `pp.activation`, `dp.grads`."""
    op: str
    """Collective: `all_reduce`, `all_gather`, `reduce_scatter`, `all_to_all`, `send_recv`."""
    axis: str
    """Parallel axis whose group it runs on: tp, cp, ep, dp, pp."""
    message_bytes: float
    """Size in the nccl-tests convention (see cost.collectives)."""
    phase: str
    """`fwd`, `bwd`, `recompute` (per micro-batch and layer) or `step` (once per optimizer step)."""
    overlappable: bool = False
    """Can run concurrently with compute under the plan's settings."""
    hides_behind: str = "phase"
    """What compute an overlappable transfer can hide behind: `phase` (all matrix work of its phase),
    `attention` (only the attention core of its phase: a context-parallel KV exchange must arrive while the
    attention blocks that need it run — Liu et al., Ring Attention, 2023 §3) or `pass_pair` (the matrix work of
    another micro-batch's pass that runs merged with this one: the expert all-to-all under Megatron-Core's combined
    1F1B or DualPipe — schedule.step.pass_pair_hidden_s) or `share` (its phase's matrix work, but only on the
    share of micro-batches that run it, which is its count ≤ 1: ZeRO-2's reduce-scatter after each backward but
    the last — it hides at most that share of the phase's matrix work, the rest of which the step's sync has)."""


@dataclass(frozen=True, slots=True)
class Residency:
    """A data item held by a rank: its size and where it lives."""

    item: str
    """`weights`, `gradients`, `optimizer_state`, `activations`, `temporaries`, `kv_cache`, `checkpoint`."""
    bytes_per_rank: float
    level: str = "hbm"
    accesses_per_step: float = 1.0
    """How many times per step the whole item is read or written."""
    note: str = ""


@dataclass(frozen=True, slots=True)
class StageWork:
    """Per micro-batch work of one pipeline stage (all its layers), split by phase."""

    index: int
    """Stage index 0…pp−1 (first holds the embedding, last the output layer)."""
    layers: int
    ops: tuple[tuple[Op, float], ...]
    """(op, executions per micro-batch) pairs."""
    transfers: tuple[tuple[Transfer, float], ...]
    """(transfer, occurrences per micro-batch) pairs."""
    params: float
    """Parameters held by one rank of this stage (after tp/ep sharding, before ZeRO)."""
    expert_params: float = 0.0
    """Part of `params` in routed experts: replicated only over the expert-data-parallel group (dp·cp/ep ranks),
    so ZeRO shards them and their gradients are synchronised over that group, not over dp."""


@dataclass(frozen=True, slots=True)
class Workload:
    """Everything a training step asks of the ranks of the most loaded stage and its neighbours."""

    stages: tuple[StageWork, ...]
    """One entry per pipeline stage (pp of them); each describes one rank of that stage."""
    step_transfers: tuple[tuple[Transfer, float], ...]
    """Once-per-step transfers (gradient sync, parameter all-gather) per rank of the most loaded stage."""
    optimizer_ops: tuple[tuple[Op, float], ...]
    num_microbatches: int
    tokens_per_step: float
    model_flop_per_step: float
    """Useful FLOPs per step over the whole job (model-FLOPs convention, no recompute)."""
    params_total: float
    notes: tuple[str, ...] = field(default_factory=tuple)
    layer_work: tuple = ()
    """(layer kind (MoE?, sliding window?), ops, transfers) of one layer of each kind: the items a stage holds once
    per layer of that kind (the same objects)."""
    end_work: tuple = ()
    """Under interleaving: (ops, transfers) of the embedding end and of the output end (output layer, loss,
    multi-token prediction), which sit in the first stage's first chunk and the head stage's last."""
