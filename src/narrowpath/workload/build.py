"""Turn a Scenario into a Workload: per-stage ops and transfers per micro-batch, step transfers, optimizer ops.

Conventions (stated so that every number can be traced):
- Gradients are communicated in fp16 for fp16 runs and in fp32 otherwise (Megatron-LM: bf16 implies
  --accumulate-allreduce-grads-in-fp32); weights are all-gathered in 16 bit (8 bit for fp8 runs is not assumed).
- Mixed-precision Adam keeps fp32 master weights + two moments: 12 bytes/param (Rajbhandari et al. SC'20, ZeRO §3).
- Pipeline point-to-point messages use Megatron's scatter-gather optimisation: b·s·h·A / t per rank.
"""
from __future__ import annotations

import math

from narrowpath.spec.scenario import Scenario
from narrowpath.workload import transformer as T
from narrowpath.workload.items import Op, StageWork, Transfer, Workload


def grad_bytes_per_param(precision: str) -> int:
    return 2 if precision == "fp16" else 4


def weight_bytes_per_param(precision: str) -> int:
    return 4 if precision == "fp32" else 2


def zero_shards(plan, *, expert: bool = False) -> int:
    """Ranks a ZeRO stage shards one rank's parameters over: the data-parallel group with context parallelism
    (Megatron's distributed optimizer uses the dp×cp group), or for routed experts the expert-dp group dp·cp/ep."""
    n = plan.dp * plan.cp
    return max(1, n // plan.ep) if expert else n


def stage_layer_ranges(layers: int, pp: int, vpp: int) -> list[list[range]]:
    """Layer index ranges of each stage's chunks: chunk j = stage j mod pp.

    When the chunks do not divide the layers but divide layers + 2, the embedding and the loss count as one
    layer each (Megatron-Core's account_for_embedding_in_pipeline_split / account_for_loss_in_pipeline_split, used
    by Megatron-Bridge's Llama-3.1 405B recipes: 126 layers on 16 × 8 chunks): the first and the last chunk hold
    one layer fewer, possibly none. Otherwise, when the layers do not split evenly, the extra layers go to chunks of
    the middle stages first, since the first stage also runs the embedding and the last the output layer and loss
    (Llama 3, Dubey et al. 2024 §3.3.2: one layer fewer on the first and last stage for 126 layers on 16 stages);
    only then to the first and last stages."""
    chunks = pp * vpp
    if layers % chunks and (layers + 2) % chunks == 0:
        per = (layers + 2) // chunks
        sizes = [per - (1 if j in (0, chunks - 1) else 0) for j in range(chunks)]
        if chunks == 1:
            sizes = [layers]
    else:
        base, extra = divmod(layers, chunks)
        middle = [j for j in range(chunks) if 0 < j % pp < pp - 1]
        ends = [j for j in range(chunks) if j % pp in (0, pp - 1)]
        plus = set((middle + ends)[:extra])
        sizes = [base + (1 if j in plus else 0) for j in range(chunks)]
    out: list[list[range]] = [[] for _ in range(pp)]
    start = 0
    for j, n in enumerate(sizes):
        out[j % pp].append(range(start, start + n))
        start += n
    return out


def max_pipeline_chunks(layers: int) -> int:
    """Most pipeline chunks (pp·vpp) a model of `layers` layers splits into: one layer each, or layers + 2 when
    the embedding and the loss count as layers (see `stage_layer_ranges`)."""
    return layers + 2


def _layer_work(scn: Scenario, kernel: str, moe_layer: bool) -> tuple[list[tuple[Op, float]], list[tuple[Transfer, float]]]:
    model, plan = scn.model, scn.plan
    A = T.act_bytes(plan)
    b, s, h = plan.mbs, model.seq_len // plan.cp, model.hidden
    fwd = [op for op in T.layer_forward_ops(model, plan, kernel)]
    if moe_layer and model.moe is not None:
        moe = model.moe
        mlp_names = {"mlp_gate_up", "mlp_swiglu", "mlp_down", "mlp_up", "mlp_bias_gelu"}
        fwd = [op for op in fwd if op.name not in mlp_names]
        fwd.append(T.gemm("router", "fwd", b * s, h, moe.num_experts, plan.precision, A, A))
        # the rank's num_experts/ep experts share its routed tokens (balanced routing): one grouped GEMM each
        fwd += T.mlp_forward_ops(model, plan, moe.expert_ffn, tokens_scale=moe.top_k * moe.capacity_factor,
                                 prefix="expert", groups=max(1, moe.num_experts // plan.ep))
        if moe.shared_experts:
            fwd += T.mlp_forward_ops(model, plan, moe.expert_ffn, tokens_scale=moe.shared_experts, prefix="shared",
                                     groups=moe.shared_experts)
    ops: list[tuple[Op, float]] = [(op, 1.0) for op in fwd]
    ops += [(op, 1.0) for op in T.backward_ops(fwd)]
    if plan.recompute == "full":
        ops += [(op, 1.0) for op in T.as_phase(fwd, "recompute")]
    elif plan.recompute == "selective" and kernel != "flash":
        core = T.attention_ops(model, plan, kernel, phase="recompute")
        ops += [(op, 1.0) for op in core]

    xfers: list[tuple[Transfer, float]] = []
    ov = plan.tp_comm_overlap
    act = b * s * h * A
    if plan.tp > 1:
        phases = ["fwd", "bwd"] + (["recompute"] if plan.recompute == "full" else [])
        for ph in phases:
            if plan.sequence_parallel:
                xfers.append((Transfer("tp.all_gather", "all_gather", "tp", act, ph, ov), 2.0))
                xfers.append((Transfer("tp.reduce_scatter", "reduce_scatter", "tp", act, ph, ov), 2.0))
                if ph == "bwd":
                    # Megatron re-gathers the sequence-parallel input of the column-parallel GEMMs for their weight
                    # gradient, asynchronously behind the input-gradient GEMM (Korthikanti et al. 2022 §4.2.2).
                    xfers.append((Transfer("tp.wgrad_input_all_gather", "all_gather", "tp", act, ph, True), 2.0))
            else:
                xfers.append((Transfer("tp.all_reduce", "all_reduce", "tp", act, ph, ov), 2.0))
    if plan.cp > 1:
        xfers += cp_transfers(model, plan, b * s, A, recompute_core=plan.recompute == "selective" and kernel != "flash")
    if moe_layer and model.moe is not None and plan.ep > 1:
        tok = b * s * model.moe.top_k * model.moe.capacity_factor * h * A
        for ph in ("fwd", "bwd") + (("recompute",) if plan.recompute == "full" else ()):
            xfers.append((Transfer("ep.dispatch_combine", "all_to_all", "ep", tok, ph, False), 2.0))
    if plan.zero_stage == 3 or zero2_per_microbatch(plan):
        p = T.layer_params(model, plan, moe_layer=moe_layer)
        e = T.layer_expert_params(model, plan) if moe_layer else 0.0
        xfers += (zero3_transfers if plan.zero_stage == 3 else zero2_transfers)(plan, p - e, e)
    return ops, xfers


def cp_transfers(model, plan, tokens: float, a_bytes: int, *, recompute_core: bool = False
                 ) -> list[tuple[Transfer, float]]:
    """Context-parallel traffic of one layer and micro-batch on one rank (`tokens` = b·s/cp local tokens), by
    `plan.cp_comm` (Megatron-Core --cp-comm-type). A recompute pass that re-runs the attention core needs the
    remote K, V again: a full recompute, or a selective one with the unfused kernel (`recompute_core`; there the
    output all-to-all of a2a is not repeated, the recomputed core only rebuilds the scores kept for backward):
    p2p         ring: K, V go round the ring in forward, again in backward beside the reduce-scatter of their
                gradients, and again in a full recompute's forward; each hides behind the attention blocks
                (Liu et al., Ring Attention, 2023)
    all_gather  K, V all-gathered before attention, in forward, again in backward (Transformer Engine's
                AttnFuncWithCPAndKVAllGather saves only the local K, V and re-gathers them) and in a full
                recompute; their gradients reduce-scattered after backward; all on the critical path (Llama 3,
                Dubey et al. 2024 §3.3.2: small with GQA, but exposed)
    a2a         all-to-all of Q, K, V from sequence- to head-split before attention and of the output back after,
                and the same for the gradients in backward, on the critical path (DeepSpeed-Ulysses, Jacobs et al.
                2023)"""
    phases = ("fwd", "bwd") + (("recompute",) if plan.recompute == "full" or recompute_core else ())
    # K or V width a tp rank holds: a whole head when tp exceeds the kv heads (replicated, as attention_ops counts)
    kv_w = T.kv_width_per_rank(model, plan.tp)
    if plan.cp_comm == "a2a":
        qkv = tokens * (model.q_dim / plan.tp + 2 * kv_w) * a_bytes
        out = tokens * model.q_dim / plan.tp * a_bytes
        return [(Transfer(f"cp.{what}_all_to_all", "all_to_all", "cp", size, ph, False), 1.0)
                for ph in phases for what, size in (("qkv", qkv), ("attn_out", out))
                if not (ph == "recompute" and what == "attn_out" and plan.recompute != "full")]
    kv = tokens * 2 * kv_w * a_bytes * plan.cp  # gathered K and V (nccl-tests AG size)
    if plan.cp_comm == "all_gather":
        gathers = [(Transfer("cp.kv_all_gather", "all_gather", "cp", kv, ph, False), 1.0) for ph in phases]
        return gathers + [(Transfer("cp.kv_grad_reduce_scatter", "reduce_scatter", "cp", kv, "bwd", False), 1.0)]
    ring = [(Transfer("cp.kv_all_gather", "all_gather", "cp", kv, ph, True, "attention"), 1.0) for ph in phases]
    return ring + [(Transfer("cp.kv_grad_reduce_scatter", "reduce_scatter", "cp", kv, "bwd", True, "attention"),
                    1.0)]


def expert_dp(plan) -> int:
    """Size of the expert-data-parallel group that replicates one rank's experts: the dp·cp ranks that hold the
    same weights (cp ranks see other sequence chunks), divided by ep (experts carved out of dp)."""
    return max(1, plan.dp * plan.cp // plan.ep)


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
    `dp_overlap` (DeepSpeed overlap_comm), else on the critical path. The last micro-batch's reduce-scatter is the
    step's gradient reduce-scatter (`_step_work`), priced like ZeRO-1's: its last bucket cannot hide."""
    gb = grad_bytes_per_param(plan.precision)
    m = plan.num_microbatches
    out: list[tuple[Transfer, float]] = []
    for axis, p, pre in synced_groups(plan, dense_params, expert_params):
        out.append((Transfer(pre + "zero2_grad_reduce_scatter", "reduce_scatter", axis, p * gb, "bwd",
                             plan.dp_overlap), (m - 1) / m))
    return out


def zero3_transfers(plan, dense_params: float, expert_params: float) -> list[tuple[Transfer, float]]:
    """ZeRO-3 per micro-batch: gather the weights before forward and again before backward, reduce-scatter the
    gradients after backward (FSDP / DeepSpeed stage 3). Experts are sharded over their own expert-dp group."""
    wb, gb = weight_bytes_per_param(plan.precision), grad_bytes_per_param(plan.precision)
    out: list[tuple[Transfer, float]] = []
    for axis, p, pre in synced_groups(plan, dense_params, expert_params):
        out.append((Transfer(pre + "zero3_param_all_gather", "all_gather", axis, p * wb, "fwd", True), 1.0))
        out.append((Transfer(pre + "zero3_param_all_gather", "all_gather", axis, p * wb, "bwd", True), 1.0))
        out.append((Transfer(pre + "zero3_grad_reduce_scatter", "reduce_scatter", axis, p * gb, "bwd", True),
                    1.0))
    return out


def _embedding_work(scn: Scenario, first: bool, last: bool) -> tuple[list[tuple[Op, float]], list[tuple[Transfer, float]]]:
    model, plan = scn.model, scn.plan
    A = T.act_bytes(plan)
    W = 1 if plan.precision == "fp8" else A
    b, s, h, t, V = plan.mbs, model.seq_len // plan.cp, model.hidden, plan.tp, model.vocab
    E = b * s * h
    ops: list[tuple[Op, float]] = []
    xf: list[tuple[Transfer, float]] = []
    act = E * A
    if first:
        ops.append((T.vector("embedding_lookup", "fwd", 2 * E * A, plan.precision), 1.0))
        ops.append((T.vector("embedding_grad", "bwd", 3 * E * A, plan.precision), 1.0))
        if t > 1:
            kind = "reduce_scatter" if plan.sequence_parallel else "all_reduce"
            xf.append((Transfer(f"tp.embedding_{kind}", kind, "tp", act, "fwd", False), 1.0))
            if plan.sequence_parallel:  # backward of the scatter into the sequence-parallel region
                xf.append((Transfer("tp.embedding_grad_all_gather", "all_gather", "tp", act, "bwd", False), 1.0))
    if last:
        dt = "bf16" if plan.precision == "fp8" else plan.precision  # the output layer is kept in 16 bit
        E_norm = E / t if plan.sequence_parallel else E
        logits = T.gemm("logits", "fwd", b * s, h, V / t, dt, A, A if plan.precision == "fp8" else W)
        ops.append((T.vector("final_norm", "fwd", 2 * E_norm * A, plan.precision), 1.0))
        ops.append((logits, 1.0))
        n_logit = b * s * V / t
        # Vocab-parallel cross entropy in fp32 (Megatron): cast, max, exp-sum, loss ≈ 16 B/logit forward,
        # softmax-gradient write + cast ≈ 12 B/logit backward. Our own kernel accounting.
        ops.append((T.vector("cross_entropy", "fwd", 16 * n_logit, "fp32", kernels=4), 1.0))
        ops.append((T.vector("cross_entropy", "bwd", 12 * n_logit, "fp32", kernels=2), 1.0))
        ops += [(op, 1.0) for op in T.backward_ops([logits])]
        ops.append((T.vector("final_norm", "bwd", 4 * E_norm * A, plan.precision), 1.0))
        if t > 1:
            xf.append((Transfer("tp.cross_entropy_stats", "all_reduce", "tp", 3 * b * s * 4, "fwd", False), 1.0))
            kind = "reduce_scatter" if plan.sequence_parallel else "all_reduce"
            if plan.sequence_parallel:
                xf.append((Transfer("tp.logits_all_gather", "all_gather", "tp", act, "fwd", False), 1.0))
            xf.append((Transfer(f"tp.logits_grad_{kind}", kind, "tp", act, "bwd", False), 1.0))
    return ops, xf


def embedding_params(scn: Scenario, first: bool, last: bool) -> float:
    model, plan = scn.model, scn.plan
    table = model.vocab * model.hidden / plan.tp
    if plan.pp == 1:
        return table * (1 if model.tied_embeddings else 2)
    return table * (int(first) + int(last)) + (model.hidden if last else 0)


def build_workload(scn: Scenario, attention_kernel: str) -> Workload:
    """The scenario's work per rank (see module docstring). `attention_kernel` is the resolved kernel (`flash` or
    `unfused`): the plan's choice, or the calibration profile's default when the plan says `auto` (schedule.step)."""
    if scn.model.arch == "lstm":
        from narrowpath.workload.lstm import build_lstm_workload
        return build_lstm_workload(scn)
    model, plan = scn.model, scn.plan
    kernel = attention_kernel
    first_moe = model.moe.first_dense_layers if model.moe is not None else model.layers
    dense_ops, dense_xf = _layer_work(scn, kernel, False)
    moe_work = _layer_work(scn, kernel, True) if model.moe is not None else None
    A = T.act_bytes(plan)
    b, s, h = plan.mbs, model.seq_len // plan.cp, model.hidden
    p2p_bytes = b * s * h * A / plan.tp
    stages = []
    for i, ranges in enumerate(stage_layer_ranges(model.layers, plan.pp, plan.vpp)):
        idx = [li for r in ranges for li in r]
        n_moe = sum(1 for li in idx if li >= first_moe)
        n_dense = len(idx) - n_moe
        ops = [(op, c * n_dense) for op, c in dense_ops] if n_dense else []
        xf = [(tr, c * n_dense) for tr, c in dense_xf] if n_dense else []
        params = n_dense * T.layer_params(model, plan)
        if n_moe and moe_work is not None:
            ops += [(op, c * n_moe) for op, c in moe_work[0]]
            xf += [(tr, c * n_moe) for tr, c in moe_work[1]]
            params += n_moe * T.layer_params(model, plan, moe_layer=True)
        first, last = i == 0, i == plan.pp - 1
        e_ops, e_xf = _embedding_work(scn, first, last)
        ops += e_ops
        xf += e_xf
        emb = embedding_params(scn, first, last)
        params += emb
        if plan.zero_stage == 3:
            xf += zero3_transfers(plan, emb, 0.0)
        elif zero2_per_microbatch(plan):
            xf += zero2_transfers(plan, emb, 0.0)
        expert = n_moe * T.layer_expert_params(model, plan) if moe_work is not None else 0.0
        if plan.pp > 1:
            # Each chunk boundary sends activations forward and receives gradients backward, per micro-batch.
            n_send = plan.vpp if not last else plan.vpp - 1
            n_recv = plan.vpp if not first else plan.vpp - 1
            sends = (n_send + n_recv) / 2.0
            if sends > 0:
                xf.append((Transfer("pp.activation", "send_recv", "pp", p2p_bytes, "fwd", False), sends))
                xf.append((Transfer("pp.gradient", "send_recv", "pp", p2p_bytes, "bwd", False), sends))
        stages.append(StageWork(i, len(idx), tuple(ops), tuple(xf), params, expert))

    step_xf, opt_ops = _step_work(scn, stages)
    tokens = plan.gbs * model.seq_len
    useful = _model_flop_per_step(scn, stages)
    total_params = _total_params(scn)
    return Workload(tuple(stages), tuple(step_xf), tuple(opt_ops), plan.num_microbatches, tokens, useful,
                    total_params, ())


def _step_work(scn: Scenario, stages) -> tuple[list[tuple[Transfer, float]], list[tuple[Op, float]]]:
    """Gradient sync, parameter all-gather and optimizer update for the most loaded stage's rank."""
    plan = scn.plan
    top = max(stages, key=lambda st: st.params)
    params, expert = top.params, top.expert_params
    dense = params - expert
    G = grad_bytes_per_param(plan.precision)
    Wb = weight_bytes_per_param(plan.precision)
    xf: list[tuple[Transfer, float]] = []
    ov = plan.dp_overlap
    for axis, p, pre in synced_groups(plan, dense, expert):
        if plan.zero_stage == 0:
            xf.append((Transfer(pre + "grad_all_reduce", "all_reduce", axis, p * G, "step", ov), 1.0))
        elif plan.zero_stage in (1, 2):
            # ZeRO-2 with accumulation: the last micro-batch's reduce-scatter (the earlier ones: zero2_transfers)
            xf.append((Transfer(pre + "grad_reduce_scatter", "reduce_scatter", axis, p * G, "step", ov), 1.0))
            xf.append((Transfer(pre + "param_all_gather", "all_gather", axis, p * Wb, "step", ov), 1.0))
    if plan.pp > 1 and scn.model.tied_embeddings:
        emb = scn.model.vocab * scn.model.hidden / plan.tp
        xf.append((Transfer("pp.tied_embedding_all_reduce", "all_reduce", "pp_ends", emb * G, "step", False), 1.0))
    local = dense / zero_shards(plan) + expert / zero_shards(plan, expert=True) if plan.zero_stage >= 1 else params
    # Adam (mixed precision): read grad G, master/m/v 12, write master/m/v 12 and the 16-bit weight Wb;
    # plus the gradient-norm pass (read G). fp32 runs have no separate master copy.
    per_param = (G + 12 + 12 + Wb + G) if plan.precision != "fp32" else (4 + 12 + 12 + 4)
    kernels = 2 + math.ceil(local / 2.0e7)
    opt = Op("adam", "vector", "optimizer", 0.0, local * per_param, "fp32", kernels)
    return xf, [(opt, 1.0)]


def _model_flop_per_step(scn: Scenario, stages) -> float:
    """Useful FLOPs of the whole job per step: 3 × forward matrix/attention FLOPs, no recompute (model FLOPs)."""
    plan = scn.plan
    per_rank_mb = 0.0
    for st in stages:
        for op, c in st.ops:
            if op.phase == "fwd" and op.kind in ("matrix", "flash"):
                per_rank_mb += op.useful_flop * c
    # every (tp, cp) rank of a pipeline holds 1/(tp·cp) of the work; dp pipelines each run m micro-batches
    return 3.0 * per_rank_mb * plan.tp * plan.cp * plan.dp * plan.num_microbatches


def _total_params(scn: Scenario) -> float:
    from narrowpath.workload.counts import parameter_count
    return parameter_count(scn.model)
