"""Turn a Scenario into a Workload: per-stage ops and transfers per micro-batch, step transfers, optimizer ops.

Conventions (stated so that every number can be traced):
- Gradients are accumulated and communicated in fp16 for fp16 runs and in fp32 otherwise (Megatron-LM: bf16
  implies --accumulate-allreduce-grads-in-fp32), unless plan.grad_precision says fp32 or bf16 (grad_bytes_per_param;
  NVIDIA's performance recipes reduce in bf16); weights are all-gathered in 16 bit, in FP8 with per-tensor FP8
  primary weights (plan.fp8_params; sharded_weight_bytes_per_param).
- Mixed-precision Adam keeps fp32 master weights + two moments: 12 bytes/param (Rajbhandari et al. SC'20, ZeRO §3).
- Pipeline point-to-point messages use Megatron's scatter-gather optimisation: b·s·h·A / t per rank.
"""
from __future__ import annotations

import dataclasses
import math
from functools import lru_cache

from narrowpath.network.placement import group_span
from narrowpath.spec.scenario import Scenario
from narrowpath.workload import transformer as T
from narrowpath.workload.context_parallel import cp_transfers
from narrowpath.workload.items import Op, StageWork, Transfer, Workload
from narrowpath.workload.moe import moe_transfers, token_count_transfers
from narrowpath.workload.ops import quantize_op
from narrowpath.workload.split import (block_recompute, end_rerun_share, offload_fraction, plan_layer_ranges,
                                      rerun_kind_counts, rerun_scaled, split_notes)
from narrowpath.workload.loss import cross_entropy_ops
from narrowpath.workload.recompute import (alternate_matmuls_recomputed, kept_bytes, modules_of, recompute_ops,
                                          tp_block_recomputed)
from narrowpath.workload.precision import (core_dtype, gather_bytes, operand_bytes, quantize_cost,
                                          quantized_weight_copies)


def grad_format(plan) -> str:
    """Format of the gradients a rank accumulates and reduces (plan.grad_precision): fp16 for fp16 runs and bf16 when
    the plan says so (Megatron-Core grad_reduce_in_fp32 = False), else fp32."""
    if plan.grad_precision != "auto":
        return plan.grad_precision
    return "fp16" if plan.precision == "fp16" else "fp32"


def grad_bytes_per_param(plan) -> int:
    """Bytes of one gradient in the buffer a rank accumulates and reduces (`grad_format`)."""
    return 4 if grad_format(plan) == "fp32" else 2


def weight_bytes_per_param(precision: str) -> int:
    return 4 if precision == "fp32" else 2


def held_weight_bytes_per_param(plan, fp8_any_layout: bool) -> float:
    """Bytes per parameter of the linear layers' weights a rank keeps between optimizer steps without ZeRO-3: the
    16-bit weights, plus under a low-precision recipe Transformer Engine's cached quantized copies (row-wise for the
    forward GEMM and column-wise for the data-gradient GEMM; one per-tensor FP8 copy where FP8 GEMMs take any
    layout); with FP8 primary weights (plan.fp8_params) the quantized copies alone. The embedding and output layer
    are not Transformer Engine modules and keep 16-bit weights only (`weight_bytes_per_param`)."""
    if not plan.low_precision:
        return float(weight_bytes_per_param(plan.precision))
    copies = quantized_weight_copies(plan.precision, fp8_any_layout) * operand_bytes(plan)
    return copies if plan.fp8_params else weight_bytes_per_param(plan.precision) + copies


def fp8_primary_weights(plan) -> bool:
    """Per-tensor FP8 primary weights (plan.fp8_params with precision fp8): gathered and stored as FP8 values with no
    16-bit copy anywhere. MXFP8 primary weights pass through a bf16 copy (`sharded_weight_bytes_per_param`)."""
    return plan.fp8_params and plan.precision == "fp8"


def weight_transpose_op(phase: str, elements: float) -> Op:
    """The column-wise copy of FP8 weights, a transpose (read 1 B, write 1 B per element), all of it bytes that
    devices whose FP8 GEMMs take any layout do not move (Op.transpose_bytes)."""
    return Op("weight_transpose", "vector", phase, 0.0, 2 * elements, "bf16", 1, transpose_bytes=2 * elements)


def sharded_weight_bytes_per_param(plan) -> float:
    """Bytes per parameter of a linear layer's ZeRO-3 weight shard, and of what ZeRO's parameter all-gathers move: the
    16-bit weights, or with FP8 primary weights (Megatron-Core fp8_param_gather) the per-tensor FP8 values (1 B).
    MXFP8 primary weights are gathered in bf16: Megatron-Bridge's MXFP8 recipe sets reuse_grad_buf_for_mxfp8_param_ag,
    so the distributed optimizer all-gathers a bf16 copy through the gradient buffer and quantizes it into the
    MXFP8 tensors (`finish_param_sync`); 2 B."""
    return operand_bytes(plan) if fp8_primary_weights(plan) else float(weight_bytes_per_param(plan.precision))


def moment_bytes(plan) -> int:
    """Bytes of one Adam moment per parameter (plan.optimizer_moments)."""
    return 2 if plan.optimizer_moments == "bf16" else 4


def optimizer_state_bytes_per_param(plan) -> int:
    """Optimizer state per parameter: Adam's two moments, plus the fp32 master copy of a 16-bit or low-precision
    run (ZeRO §3: K = 12 for mixed-precision Adam; 8 with 16-bit moments, DeepSeek-V3 §3.3.2; fp32 runs update
    their own weights: 8, or 4)."""
    return 2 * moment_bytes(plan) + (0 if plan.precision == "fp32" else 4)


def zero_shards(plan, *, expert: bool = False) -> int:
    """Ranks a ZeRO stage shards one rank's parameters over: the data-parallel group with context parallelism
    (Megatron's distributed optimizer uses the dp×cp group), or for routed experts the expert-dp group
    tp·cp·dp / (etp·ep)."""
    return plan.expert_dp if expert else plan.dp * plan.cp


@lru_cache(maxsize=1024)
def unrecomputed_layer_bytes(model, plan, kernel: str, moe_layer: bool, window: bool) -> float:
    """Activation bytes one layer of a kind keeps for backward per micro-batch without recompute (what its ops keep,
    less what DeepSeek-V3's FP8 cache recomputes: workload.recompute.kept_bytes): what offloading moves (cached)."""
    none = dataclasses.replace(plan, recompute="none", recompute_modules=(), recompute_layers=0)
    return kept_bytes(T.layer_forward_ops(model, none, kernel, moe_layer=moe_layer, window=window), model, none)


def stage_saved_bytes(scn: Scenario, kernel: str, layers: list[int], kind_of) -> float:
    """Activation bytes the given layers keep for backward per micro-batch without recompute."""
    per_kind: dict = {}
    total = 0.0
    for li in layers:
        kind = kind_of[li]
        if kind not in per_kind:
            per_kind[kind] = unrecomputed_layer_bytes(scn.model, scn.plan, kernel, kind[0], kind[1])
        total += per_kind[kind]
    return total


def _layer_work(scn: Scenario, kernel: str, moe_layer: bool, window: bool = False
                ) -> tuple[list[tuple[Op, float]], list[tuple[Transfer, float]]]:
    """Ops (forward, backward, recompute) and transfers of one layer of a kind, per micro-batch on one rank."""
    moe_layer = moe_layer and scn.model.moe is not None
    return (layer_ops(scn, kernel, moe_layer, window),
            layer_comm(scn, kernel, moe_layer) + layer_zero_transfers(scn.model, scn.plan, moe_layer))


def layer_ops(scn: Scenario, kernel: str, moe_layer: bool, window: bool = False) -> list[tuple[Op, float]]:
    """Ops of one layer of a kind per micro-batch on one rank: forward, backward, the recompute pass, and with
    ZeRO-3 under a low-precision recipe the re-quantization of the gathered weights."""
    model, plan = scn.model, scn.plan
    moe_layer = moe_layer and model.moe is not None
    fwd = T.layer_forward_ops(model, plan, kernel, moe_layer=moe_layer, window=window)
    ops: list[tuple[Op, float]] = [(op, 1.0) for op in fwd]
    ops += [(op, 1.0) for op in T.backward_ops(fwd, plan)]
    if plan.recompute == "full":
        ops += [(op, 1.0) for op in T.as_phase(fwd, "recompute")]
    elif modules_of(plan):  # the modules' forward ops again (workload.recompute; DeepSeek-V3's fp8 cache too)
        ops += [(op, 1.0) for op in recompute_ops(fwd, model, plan, kernel, window)]
    if plan.comm_zero_stage == 3 and plan.low_precision:
        w = T.layer_params(model, plan, moe_layer=moe_layer)
        if fp8_primary_weights(plan):
            # gathered FP8 primary weights: only their column-wise copy is made, which devices whose FP8 GEMMs take
            # any layout skip
            if not scn.system.device.fp8_any_layout:
                ops.append((weight_transpose_op("fwd", w), 1.0))
        else:
            # gathered 16-bit weights (or MXFP8 weights gathered in bf16) are quantized again every micro-batch
            # (Megatron-FSDP keeps no quantized cache)
            q = quantize_cost(plan.precision)
            ops.append((quantize_op("weight_quantize", "fwd", w, q), 1.0))
    if plan.cuda_graphs:
        syncs = any(op.host_syncs for op, _ in ops)
        ops = graphed(ops, eager=EXPERT_PATH if syncs else ())
    return ops


EXPERT_PATH = ("moe_permute", "expert", "shared", "moe_unpermute")
"""Ops of an MoE layer after a host sync (token counts; a clamped GLU's offset copy), which Megatron-Core does not
capture in a CUDA graph (spec.plan cuda_graphs): the permutation, routed and shared experts, the unpermutation."""


def graphed(ops: list[tuple[Op, float]], eager: tuple[str, ...] = ()) -> list[tuple[Op, float]]:
    """The ops replayed from a captured CUDA graph (plan.cuda_graphs): the host issues none of their kernels one by
    one (one graph launch per layer pass, a few microseconds, is left out); their host synchronisations stay. Ops
    whose name starts with one of `eager` stay as they are."""
    return [(op if op.name.startswith(eager) else dataclasses.replace(op, host_kernels=0), c) for op, c in ops]


def layer_comm(scn: Scenario, kernel: str, moe_layer: bool) -> list[tuple[Transfer, float]]:
    """Tensor-, context- and expert-parallel transfers of one layer of a kind per micro-batch on one rank."""
    model, plan = scn.model, scn.plan
    moe_layer = moe_layer and model.moe is not None
    A = T.act_bytes(plan)
    b, s, h = plan.mbs, model.seq_len // plan.cp, model.hidden
    xfers: list[tuple[Transfer, float]] = []
    ov = plan.tp_comm_overlap
    act = b * s * h * A
    gathered = b * s * h * gather_bytes(plan)  # a gather feeding a GEMM moves its operand format
    if plan.tp > 1:
        # one gather/scatter pair around the attention block and one around a tp-sharded MLP (a dense MLP or an
        # MoE layer's shared experts); routed experts take their tokens from the dispatcher: the all-to-all of the
        # sequence-parallel shard's copies and, with etp > 1, its gather of the received copies over the expert-tp
        # ranks (workload.moe.moe_transfers; Megatron-Core MoEAlltoAllTokenDispatcher) — no gather of the layer's
        # input around it
        mlp_pair = 1.0 if not moe_layer or model.moe.shared_experts else 0.0
        if model.parallel_attn_mlp:  # dense layers only: spec.model refuses experts in a parallel block
            # a parallel block (workload.transformer.parallel_block_ops) gathers the norm's output once for both
            # column-parallel inputs and sums both row-parallel outputs before one scatter (GPT-NeoX's
            # gpt_j_residual reduces once); backward sums both input gradients before one reduction
            mlp_pair = 0.0
        # MLA under sequence parallelism gathers its latents, not the layer's input: the duplicated down-projections
        # run on the rank's shard (workload.attention.attention_block_ops)
        mla_sp = model.mla is not None and plan.sequence_parallel
        attn_gather = b * s * T.mla_gathered_width(model, gather_bytes(plan), A) if mla_sp else gathered
        # a full recompute gathers and scatters around both blocks again; a selectively recomputed tp-sharded MLP
        # block (workload.recompute) around that block
        if plan.recompute == "full" or alternate_matmuls_recomputed(model, plan, moe_layer):
            again = (1.0, mlp_pair)
        else:
            again = (0.0, 1.0 if tp_block_recomputed(model, plan, moe_layer) else 0.0)
            if mla_sp and "mla_up_proj" in modules_of(plan):
                # re-running MLA's up-projections gathers their latents again (no scatter: the core is not re-run)
                xfers.append((Transfer("tp.all_gather", "all_gather", "tp", attn_gather, "recompute", ov), 1.0))
        for ph, (na, nm) in (("fwd", (1.0, mlp_pair)), ("bwd", (1.0, mlp_pair)), ("recompute", again)):
            n = na + nm
            if not n:
                continue
            if plan.sequence_parallel:
                gathers = [(gathered, n)] if attn_gather == gathered else [(attn_gather, na), (gathered, nm)]
                xfers += [(Transfer("tp.all_gather", "all_gather", "tp", g, ph, ov), c) for g, c in gathers if c]
                xfers.append((Transfer("tp.reduce_scatter", "reduce_scatter", "tp", act, ph, ov), n))
                if ph == "bwd":
                    # Megatron re-gathers the sequence-parallel input of the column-parallel GEMMs for their weight
                    # gradient, asynchronously behind the input-gradient GEMM (Korthikanti et al. 2022 §4.2.2).
                    xfers += [(Transfer("tp.wgrad_input_all_gather", "all_gather", "tp", g, ph, True), c)
                              for g, c in gathers if c]
            else:
                xfers.append((Transfer("tp.all_reduce", "all_reduce", "tp", act, ph, ov), n))
    if plan.cp > 1:
        xfers += cp_transfers(model, plan, b * s, A,
                              recompute_core="core_attn" in modules_of(plan))
    if moe_layer:
        span = group_span(plan, scn.system, "ep") if plan.ep > 1 and plan.ep_dispatch == "dedup" else None
        xfers += token_count_transfers(model, plan)
        xfers += moe_transfers(model, plan, span.domains if span else 1, span.ranks_per_domain if span else 1)
    return xfers


def layer_zero_transfers(model, plan, moe_layer: bool) -> list[tuple[Transfer, float]]:
    """ZeRO-3 (and ZeRO-2 with gradient accumulation) traffic of one layer of a kind per micro-batch on one rank."""
    if plan.comm_zero_stage == 3 or zero2_per_microbatch(plan):
        moe_layer = moe_layer and model.moe is not None
        p = T.layer_params(model, plan, moe_layer=moe_layer)
        e = T.layer_expert_params(model, plan) if moe_layer else 0.0
        return (zero3_transfers if plan.comm_zero_stage == 3 else zero2_transfers)(plan, p - e, e)
    return []


def expert_dp(plan) -> int:
    """Size of the expert-data-parallel group that replicates one rank's experts: tp·cp·dp / (etp·ep)
    (Megatron-Core's expert layout, network.placement)."""
    return plan.expert_dp


def dense_dp(plan) -> int:
    """Size of the group that syncs (and ZeRO-shards) dense gradients and weights: dp × cp (Megatron-LM reduces
    gradients over the data-parallel group with context parallelism, since cp ranks hold the same weights)."""
    return plan.dp * plan.cp


def synced_groups(plan, dense_params: float, expert_params: float) -> list[tuple[str, float, str]]:
    """(axis, parameters, transfer-name prefix) of each group that syncs or shards one rank's parameters: dense
    ones over dp·cp (`dp`), routed experts over their expert-dp group (`edp`); groups of one rank or with no
    parameters are left out."""
    return [(axis, p, pre) for axis, n, p, pre in (("dp", dense_dp(plan), dense_params, "dp."),
                                                   ("edp", expert_dp(plan), expert_params, "dp.expert_"))
            if n > 1 and p > 0]


def zero2_per_microbatch(plan) -> bool:
    """ZeRO-2 keeps only its shard of the gradients, so with gradient accumulation it must reduce-scatter them
    after every backward, not once per step (DeepSpeed stage 2; maintainers in deepspeedai/DeepSpeed#2252)."""
    return plan.zero_stage == 2 and plan.num_microbatches > 1


def zero2_transfers(plan, dense_params: float, expert_params: float) -> list[tuple[Transfer, float]]:
    """ZeRO-2 with gradient accumulation: one layer's gradients reduce-scattered after its backward in each of the
    first m − 1 micro-batches (count (m − 1)/m per micro-batch), behind the backward of the layers before it when
    `dp_overlap` (DeepSpeed overlap_comm), else on the critical path — behind those m − 1 backwards only (`share`:
    at most (m − 1)/m of a mean backward's matrix work). The last micro-batch's reduce-scatter is the step's gradient
    reduce-scatter (`_step_work`), priced like ZeRO-1's behind the last backward: its last bucket cannot hide."""
    gb = grad_bytes_per_param(plan)
    out: list[tuple[Transfer, float]] = []
    for axis, p, pre in synced_groups(plan, dense_params, expert_params):
        out.append((Transfer(pre + "zero2_grad_reduce_scatter", "reduce_scatter", axis, p * gb, "bwd",
                             plan.dp_overlap, hides_behind="share"), microbatch_share(plan)))
    return out


def microbatch_share(plan) -> float:
    """Share of a step's micro-batches that run a `share` transfer (items.Transfer): all but the last, (m − 1)/m."""
    m = plan.num_microbatches
    return (m - 1) / m


def zero3_transfers(plan, dense_params: float, expert_params: float) -> list[tuple[Transfer, float]]:
    """ZeRO-3 per micro-batch: gather the weights before forward and again before backward, reduce-scatter the
    gradients after backward (FSDP / DeepSpeed stage 3). Experts are sharded over their own expert-dp group."""
    wb, gb = sharded_weight_bytes_per_param(plan), grad_bytes_per_param(plan)
    out: list[tuple[Transfer, float]] = []
    for axis, p, pre in synced_groups(plan, dense_params, expert_params):
        out.append((Transfer(pre + "zero3_param_all_gather", "all_gather", axis, p * wb, "fwd", True), 1.0))
        out.append((Transfer(pre + "zero3_param_all_gather", "all_gather", axis, p * wb, "bwd", True), 1.0))
        out.append((Transfer(pre + "zero3_grad_reduce_scatter", "reduce_scatter", axis, p * gb, "bwd", True),
                    1.0))
    return out


def _embedding_work(scn: Scenario, first: bool, last: bool) -> tuple[list[tuple[Op, float]], list[tuple[Transfer, float]]]:
    """Embedding lookup on the first stage; final norm, output layer (kept in 16 bit) and vocab-parallel cross
    entropy on the last; and there too the multi-token-prediction modules (DeepSeek-V3 §2.2)."""
    model, plan = scn.model, scn.plan
    A = T.act_bytes(plan)
    b, s, h, t, V = plan.mbs, model.seq_len // plan.cp, model.hidden, plan.tp, model.vocab
    E = b * s * h
    ops: list[tuple[Op, float]] = []
    xf: list[tuple[Transfer, float]] = []
    act = E * A
    if first:
        ops.append((T.vector("embedding_lookup", "fwd", 2 * E * A, plan.precision), 1.0))
        ops.append((T.vector("embedding_grad", "bwd", 3 * E * A, plan.precision), 1.0))
        # the lookup's weight gradient is a dense table (PyTorch's embedding_dense_backward zero-fills it before
        # adding the tokens' rows), which the data-parallel wrapper adds into the main gradient every micro-batch
        # (Megatron-Core DistributedDataParallel's backward hook: param.main_grad.add_(param.grad)): write the table,
        # read it and the main gradient, write the main gradient
        table = V / t * h
        ops.append((T.vector("embedding_wgrad_accumulate", "bwd", table * (2 * A + 2 * grad_bytes_per_param(plan)),
                             plan.precision, kernels=2), 1.0))
        if t > 1:
            kind = "reduce_scatter" if plan.sequence_parallel else "all_reduce"
            xf.append((Transfer(f"tp.embedding_{kind}", kind, "tp", act, "fwd", False), 1.0))
            if plan.sequence_parallel:  # backward of the scatter into the sequence-parallel region
                xf.append((Transfer("tp.embedding_grad_all_gather", "all_gather", "tp", act, "bwd", False), 1.0))
    if last:
        heads = 1 + model.mtp_layers  # the main output and one per predicted depth, sharing the output layer
        E_norm = E / t if plan.sequence_parallel else E
        logits = T.gemm("logits", "fwd", b * s, h, V / t, core_dtype(plan), A, A)
        n_logit = b * s * V / t
        head = [T.vector("final_norm", "fwd", 2 * E_norm * A, plan.precision), logits]
        ops += [(op, float(heads)) for op in head]
        ops += [(op, float(heads)) for op in cross_entropy_ops(plan, n_logit, A)]  # the stack's kernel (workload.loss)
        ops += [(op, float(heads)) for op in T.backward_ops([logits], plan)]
        ops.append((T.vector("final_norm", "bwd", 3 * E_norm * A, plan.precision), float(heads)))  # as norm_op
        if model.mtp_layers:
            ops += _mtp_ops(scn)
            # each module's transformer block exchanges as a layer of its kind does (tensor-parallel gathers, expert
            # dispatch and combine; its 2h → h projection's own gather is left out)
            xf += [(tr, c * model.mtp_layers) for tr, c in layer_comm(scn, "flash", model.moe is not None)]
        if t > 1:
            xf.append((Transfer("tp.cross_entropy_stats", "all_reduce", "tp", 3 * b * s * 4, "fwd", False),
                       float(heads)))
            kind = "reduce_scatter" if plan.sequence_parallel else "all_reduce"
            # the output layer is a column-parallel linear: its backward re-gathers a sequence-parallel input for
            # the weight gradient behind the data gradient's GEMM, and reduces the data gradient behind the weight
            # gradient's (Megatron-Core LinearWithGradAccumulationAndAsyncCommunication.backward, async_op=True)
            if plan.sequence_parallel:
                xf.append((Transfer("tp.logits_all_gather", "all_gather", "tp", act, "fwd", False), float(heads)))
                xf.append((Transfer("tp.logits_input_all_gather", "all_gather", "tp", act, "bwd", True),
                           float(heads)))
            xf.append((Transfer(f"tp.logits_grad_{kind}", kind, "tp", act, "bwd", True), float(heads)))
    return ops, xf


def _mtp_ops(scn: Scenario) -> list[tuple[Op, float]]:
    """One multi-token-prediction module per predicted depth (DeepSeek-V3 §2.2): norms of the hidden state and of
    the shifted token embedding, a projection of their concatenation 2h → h, and one transformer block (an MoE
    block when the model has experts); its output layer and loss are counted with the main head."""
    model, plan = scn.model, scn.plan
    b, s, h = plan.mbs, model.seq_len // plan.cp, model.hidden
    rows = b * s
    fwd = [T.vector("mtp_norms", "fwd", 2 * 2 * rows * h * T.act_bytes(plan), plan.precision,
                    bwd_bytes=2 * 3 * rows * h * T.act_bytes(plan))]  # as norm_op
    fwd += T.linear("mtp_proj", plan, rows, 2 * h, h / plan.tp)
    fwd += T.layer_forward_ops(model, plan, "flash", moe_layer=model.moe is not None)
    ops = fwd + T.backward_ops(fwd, plan)
    if plan.recompute == "full":
        ops += T.as_phase(fwd, "recompute")
    elif modules_of(plan):  # its layer recomputes what the stage's layers do (its memory is priced so: cost.memory)
        ops += recompute_ops(fwd, model, plan, "flash", False)
    return [(op, float(model.mtp_layers)) for op in ops]


def mtp_params(scn: Scenario) -> float:
    """Parameters of the multi-token-prediction modules on one rank of the last stage: per depth a 2h → h
    projection, two norms and one transformer layer."""
    model, plan = scn.model, scn.plan
    per = 2 * model.hidden * model.hidden / plan.tp + 2 * model.hidden \
        + T.layer_params(model, plan, moe_layer=model.moe is not None)
    return model.mtp_layers * per


def embedding_params(scn: Scenario, first: bool, last: bool) -> float:
    return embedding_table_params(scn.model, scn.plan.tp, scn.plan.pp, first, last)


def embedding_table_params(model, tp, pp, first, last):
    """Parameters a rank holds of the embedding table (first stage), the output layer and final norm (last stage),
    after tensor parallelism (a tied table once on a rank holding both ends: pp 1, DualPipeV's rank 0); `tp`, `first`,
    `last` may be numpy arrays (the search prices many plans at once)."""
    table = model.vocab * model.hidden / tp
    if pp == 1:
        return table * (1 if model.tied_embeddings else 2) + model.hidden
    return table * (1 * first + 1 * last - 1 * (first & last) * bool(model.tied_embeddings)) + model.hidden * last


@lru_cache(maxsize=256)
def layer_kind_of(model) -> tuple[tuple[bool, bool], ...]:
    """The kind (MoE layer?, sliding-window attention?) of each layer, by index (cached per model)."""
    return tuple((model.is_moe_layer(li), model.is_window_layer(li)) for li in range(model.layers))


def layer_kinds(model) -> dict[tuple[bool, bool], list[int]]:
    """Layer indices by kind (MoE layer?, sliding-window attention?)."""
    kinds: dict[tuple[bool, bool], list[int]] = {}
    for li, kind in enumerate(layer_kind_of(model)):
        kinds.setdefault(kind, []).append(li)
    return kinds


def p2p_bytes(model, plan) -> float:
    """Bytes of one pipeline point-to-point message per micro-batch (Megatron's scatter-gather: b·s·h·A / t)."""
    return plan.mbs * (model.seq_len // plan.cp) * model.hidden * T.act_bytes(plan) / plan.tp


def pp_transfers(plan, first: bool, last: bool, p2p_bytes: float, turn: bool = False) -> list[tuple[Transfer, float]]:
    """Point-to-point traffic of one pipeline stage per micro-batch (none without pipelining).

    Each chunk boundary sends activations forward and receives gradients backward, per micro-batch. The interleaved
    schedule overlaps them with the next chunk's computation (Megatron-Core overlap_p2p_comm, on by default for
    interleaving); 1F1B, DualPipe and DualPipeV wait for them (deepseek-ai/DualPipe waits on its batched isend /
    irecv before the next pass). `turn`: DualPipeV's rank p − 1, whose chunk 0 hands to its chunk 1 locally."""
    if plan.pp <= 1:
        return []
    n_send = (plan.vpp if not last else plan.vpp - 1) - turn
    n_recv = (plan.vpp if not first else plan.vpp - 1) - turn
    sends = (n_send + n_recv) / 2.0
    ov = plan.vpp > 1 and not plan.dualpipev
    if sends <= 0:
        return []
    return [(Transfer("pp.activation", "send_recv", "pp", p2p_bytes, "fwd", ov), sends),
            (Transfer("pp.gradient", "send_recv", "pp", p2p_bytes, "bwd", ov), sends)]


def offload_transfers(per_mb_bytes: float) -> list[tuple[Transfer, float]]:
    """Saved activations to host memory in forward and back for backward, hidden behind compute while the host link
    keeps up (`per_mb_bytes`: the activation bytes of the offloaded layers per micro-batch)."""
    return [(Transfer("host.activation_offload", "send_recv", "host", per_mb_bytes, "fwd", True), 1.0),
            (Transfer("host.activation_reload", "send_recv", "host", per_mb_bytes, "bwd", True), 1.0)]


def build_workload(scn: Scenario, attention_kernel: str) -> Workload:
    """The scenario's work per rank (see module docstring). `attention_kernel` is the resolved kernel (`flash` or
    `unfused`): the plan's choice, or the calibration profile's default when the plan says `auto` (schedule.step)."""
    if scn.model.arch == "lstm":
        from narrowpath.workload.lstm import build_lstm_workload
        return build_lstm_workload(scn)
    model, plan = scn.model, scn.plan
    kernel = attention_kernel
    kind_of = layer_kind_of(model)
    work = {kind: _layer_work(scn, kernel, *kind) for kind in set(kind_of)}
    p2p = p2p_bytes(model, plan)
    stages = []
    alike: dict[tuple, StageWork] = {}  # stages of the same layer kinds in the same order, neither end: built once
    ends: list = [None, None]
    for i, ranges in enumerate(plan_layer_ranges(model, plan)):
        idx = [li for r in ranges for li in r]
        first, last, turn = i == 0, i == plan.head_stage, plan.dualpipev and i == plan.pp - 1
        key = (tuple(kind_of[li] for li in idx), tuple(len(r) for r in ranges), first, last, turn)
        if key in alike:
            stages.append(dataclasses.replace(alike[key], index=i))
            continue
        counts: dict[tuple[bool, bool], int] = {}
        for li in idx:
            counts[kind_of[li]] = counts.get(kind_of[li], 0) + 1
        # the recompute runs in the layers it re-runs (split.rerun_kind_counts: the block method's first ones of each
        # chunk, whichever their kinds), the MTP modules' under a recompute of all (split.end_rerun_share)
        rerun = counts
        if block_recompute(plan):
            rerun = {}
            for chunk in rerun_kind_counts(plan, ranges, kind_of):
                for kind, n in chunk.items():
                    rerun[kind] = rerun.get(kind, 0) + n
        ops: list[tuple[Op, float]] = []
        xf: list[tuple[Transfer, float]] = []
        params = expert = 0.0
        for kind, n in sorted(counts.items()):
            ops += rerun_scaled(work[kind][0], n, rerun.get(kind, 0))
            xf += rerun_scaled(work[kind][1], n, rerun.get(kind, 0))
            params += n * T.layer_params(model, plan, moe_layer=kind[0])
            expert += n * T.layer_expert_params(model, plan) if kind[0] else 0.0
        e_ops, e_xf, emb, e_expert = _end_work(scn, first, last)
        if first != last:  # the embedding end's or the output end's items, as the chunk that holds them sees them
            ends[0 if first else 1] = (tuple(e_ops), tuple(e_xf))
        ops += rerun_scaled(e_ops, 1, end_rerun_share(plan))
        xf += rerun_scaled(e_xf, 1, end_rerun_share(plan))
        params += emb
        expert += e_expert
        xf += pp_transfers(plan, first, last, p2p, turn)
        f_off = offload_fraction(plan, tuple(len(r) for r in ranges))
        if f_off > 0:
            # saved activations to host memory in forward and back for backward, hidden behind compute while the
            # host link keeps up (the activation bytes are those of the offloaded layers, workload.offload_bytes)
            xf += offload_transfers(f_off * stage_saved_bytes(scn, kernel, [li for li in idx], kind_of))
        stages.append(StageWork(i, len(idx), tuple(ops), tuple(xf), params, expert))
        alike[key] = stages[-1]

    step_xf, opt_ops = _step_work(scn, stages)
    tokens = plan.gbs * model.seq_len
    from narrowpath.workload.counts import model_flop_per_token, parameter_count
    useful = model_flop_per_token(model) * tokens
    ends = tuple(e if e is not None else _end_work(scn, j == 0, j == 1)[:2] for j, e in enumerate(ends)) \
        if plan.vpp > 1 else ()
    return Workload(tuple(stages), tuple(step_xf), tuple(opt_ops), plan.num_microbatches, tokens, useful,
                    parameter_count(model), split_notes(model, plan),
                    tuple((kind, tuple(w[0]), tuple(w[1])) for kind, w in sorted(work.items())), ends)


def _end_work(scn: Scenario, first: bool, last: bool) -> tuple[list, list, float, float]:
    """A stage's end work (`_embedding_work`) with the ZeRO-3 / per-micro-batch ZeRO-2 traffic of its parameters:
    (ops, transfers, parameters, of them routed-expert ones — the MTP modules' on the last stage)."""
    ops, xf = _embedding_work(scn, first, last)
    emb, expert = end_params(scn, first, last)
    if scn.plan.comm_zero_stage == 3:
        xf = xf + zero3_transfers(scn.plan, emb, 0.0)
    elif zero2_per_microbatch(scn.plan):
        xf = xf + zero2_transfers(scn.plan, emb, 0.0)
    return ops, xf, emb, expert


def end_params(scn: Scenario, first: bool, last: bool) -> tuple[float, float]:
    """(parameters, of them routed-expert) of a stage's ends on one rank: embedding, output layer, MTP modules."""
    mtp, model = last and scn.model.mtp_layers, scn.model
    expert = model.mtp_layers * T.layer_expert_params(model, scn.plan) if mtp and model.moe is not None else 0.0
    return embedding_params(scn, first, last) + (mtp_params(scn) if mtp else 0.0), expert


def _step_work(scn: Scenario, stages) -> tuple[list[tuple[Transfer, float]], list[tuple[Op, float]]]:
    """Gradient sync, parameter all-gather and optimizer update for the most loaded rank (`step_rank_params`)."""
    params, expert = step_rank_params(scn.plan, stages)
    return step_transfers(scn, params, expert), optimizer_ops(scn.plan, params, expert)


def step_rank_params(plan, stages) -> tuple[float, float]:
    """(parameters, of them in routed experts) of the rank the once-per-step work is sized for: the stage with the
    most parameters, or under DualPipe the rank whose two stages (i and p − 1 − i) hold the most — each copy of a
    stage syncs and updates within its own data-parallel group (deepseek-ai/DualPipe sums the twin copies'
    gradients); a DualPipeV rank is one stage of two chunks."""
    p = len(stages)
    ranks = [(st.params, st.expert_params) for st in stages] if not plan.dualpipe else \
        [(stages[i].params + stages[p - 1 - i].params, stages[i].expert_params + stages[p - 1 - i].expert_params)
         for i in range(p)]
    return max(ranks, key=lambda r: r[0])


def step_transfers(scn: Scenario, params: float, expert: float) -> list[tuple[Transfer, float]]:
    """Once-per-step transfers of a rank holding `params` parameters (`expert` of them in routed experts): gradient
    sync and ZeRO-1/2 parameter all-gather per synced group, and the tied-embedding all-reduce across the pipeline."""
    plan = scn.plan
    dense = params - expert
    G = grad_bytes_per_param(plan)
    Wb = sharded_weight_bytes_per_param(plan)
    xf: list[tuple[Transfer, float]] = []
    ov = plan.dp_overlap
    for axis, p, pre in synced_groups(plan, dense, expert):
        if plan.comm_zero_stage == 0:
            xf.append((Transfer(pre + "grad_all_reduce", "all_reduce", axis, p * G, "step", ov), 1.0))
        elif plan.comm_zero_stage in (1, 2):
            # ZeRO-2 with accumulation: the last micro-batch's reduce-scatter (the earlier ones: zero2_transfers)
            xf.append((Transfer(pre + "grad_reduce_scatter", "reduce_scatter", axis, p * G, "step", ov), 1.0))
            xf.append((Transfer(pre + "param_all_gather", "all_gather", axis, p * Wb, "step", ov), 1.0))
    if plan.pp > 1 and scn.model.tied_embeddings and not plan.dualpipev:  # DualPipeV: both ends on rank 0
        emb = scn.model.vocab * scn.model.hidden / plan.tp
        xf.append((Transfer("pp.tied_embedding_all_reduce", "all_reduce", "pp_ends", emb * G, "step", False), 1.0))
    return xf


def optimizer_ops(plan, params: float, expert: float) -> list[tuple[Op, float]]:
    """The optimizer update of a rank holding `params` parameters (`expert` of them in routed experts), after ZeRO
    sharding, and the once-per-step quantization of the updated weights under a low-precision recipe."""
    dense = params - expert
    G = grad_bytes_per_param(plan)
    Wb = weight_bytes_per_param(plan.precision)
    local = dense / zero_shards(plan) + expert / zero_shards(plan, expert=True) if plan.zero_stage >= 1 else params
    # Adam (mixed precision): read grad G, read and write the master copy and moments K (12 bytes, 8 with 16-bit
    # moments), write the 16-bit weight Wb; plus the gradient-norm pass (read G). fp32 runs have no separate master
    # copy: they read and write their weights with the moments.
    K = optimizer_state_bytes_per_param(plan)
    # per-tensor FP8 primary weights: no 16-bit weight is written (the master shard is cast to FP8 below); MXFP8
    # primary weights are written in bf16 into the gradient buffer they are gathered through
    fp8_primary = fp8_primary_weights(plan)
    Wb = 0 if fp8_primary else Wb
    per_param = (G + K + K + Wb + G) if plan.precision != "fp32" else (4 + (K + 4) + (K + 4) + 4)
    kernels = 2 + math.ceil(local / 2.0e7)
    opt = Op("adam", "vector", "optimizer", 0.0, local * per_param, "fp32", kernels)
    ops = [(opt, 1.0)]
    q = quantize_cost(plan.precision)
    if fp8_primary:
        # Megatron-Core's quantize_param_shard: the local fp32 master shard's amax (read 4 B), then its cast to FP8
        # (read 4 B, write 1 B); after the FP8 all-gather the full weights' column-wise copy
        ops.append((Op("weight_cast", "vector", "optimizer", 0.0, local * 9, "fp32", 2), 1.0))
        if plan.comm_zero_stage < 3:
            ops.append((weight_transpose_op("optimizer", params), 1.0))
    elif q is not None and plan.comm_zero_stage < 3:
        # the updated 16-bit weights are quantized once per step and cached for every micro-batch (TE's
        # is_first_microbatch); ZeRO-3 re-quantizes the gathered weights per micro-batch (see _layer_work)
        ops.append((quantize_op("weight_quantize", "optimizer", params, q, kernels=q.kernels * 2), 1.0))
    return ops
