"""The MLP half of a layer on one rank, for one micro-batch: a dense MLP, or a mixture of experts as Megatron-Core
runs it (router → permute → all-to-all dispatch → grouped expert GEMMs → all-to-all combine → unpermute, plus
shared experts).

Expert layout (Megatron-Core MoE parallel folding; Liu et al. 2025, 'MoE Parallel Folding'): the tp·cp·dp ranks of
a pipeline stage are re-split as etp × ep × edp for the experts. Each rank owns b·s/t tokens after attention (the
sequence-parallel shard; b·s when tp = 1) and sends top_k copies of each into the expert-parallel all-to-all; a
rank holds num_experts/ep experts, each split etp ways, so with balanced routing it runs
R = (b·s/t)·top_k·etp expert rows, and each of its experts' GEMMs has R/(num_experts/ep) rows.

Routing balance: token-drop routing pads every expert to its capacity (capacity_factor × the mean); dropless
routing gives each expert-parallel rank a random share of the token copies, so the busiest of ep ranks runs
n + √(2·n·ln ep) of a mean n (balls into bins, Raab & Steger 1998) and the whole group waits for it.
`dropless-balanced` is Megatron-Core's forced load balancing (`moe_router_force_load_balancing`), which routes on
random logits: that is exactly the random assignment the bound describes, so both dropless kinds are priced by it.
In training, learned routing's extra skew beyond random (kept small by the auxiliary balance loss, and changing
over training) is not modelled: no published run separates it from the rest of the step. At inference nothing
balances the router, and its skew is measured (LEARNED_EXPERT_LOAD_CV): serving prices the busiest rank with it
(workload.serving.moe_token_ops) unless an expert load balancer runs.
"""
from __future__ import annotations

import dataclasses
import math

from narrowpath.spec.model import Model, MoE
from narrowpath.spec.plan import Plan
from narrowpath.workload.attention import norm_op, residual_op
from narrowpath.workload.items import Op, Transfer
from narrowpath.workload.ops import gemm, linear, vector
from narrowpath.workload.precision import act_bytes, cached_bytes, core_dtype, dispatch_bytes
from narrowpath.workload.recompute import recomputes_dispatch


def activation_op(model: Model, plan: Plan, elements: float, name: str, keep_bytes: float | None = None) -> Op:
    """The MLP activation on `elements` outputs of the up projection (per gate branch for SwiGLU): fused
    bias-SwiGLU reads gate and up and writes their product; GeLU / squared ReLU read and write one tensor. It keeps
    its input (both branches for SwiGLU) for backward, in 16 bit or, at `keep_bytes` per element, as a
    low-precision copy the kernel also writes (DeepSeek-V3's FP8 SwiGLU input, workload.precision.CACHE_BYTES)."""
    A = act_bytes(plan)
    inputs = (2 if model.ffn_act == "swiglu" else 1) * elements
    kept = A if keep_bytes is None else keep_bytes
    # backward: SwiGLU (bias-free) reads the output's gradient and both kept inputs and writes both inputs' gradients
    # — 5 tensors, not the element-wise rule's twice the forward's 3; the others keep the rule: GPT-3-style GeLU
    # layers carry the up projection's bias, whose gradient's reduction reads the input gradient again (4 tensors),
    # and Megatron's squared ReLU runs unfused (relu, then pow: two kernels each way)
    bwd = elements * A + inputs * (kept + A) if model.ffn_act == "swiglu" else None
    return vector(name, "fwd", (inputs + elements) * A + (0.0 if keep_bytes is None else inputs * keep_bytes),
                  plan.precision, saved_bytes=inputs * kept, bwd_bytes=bwd)


def mlp_ops(model: Model, plan: Plan, ffn: int, rows: float, *, width_split: int, prefix: str = "mlp",
            groups: int = 1, fused_input: bool = True, act_keep_bytes: float | None = None,
            sp_ways: int = 1, sent_quantized: float = 1.0) -> list[Op]:
    """Up projection, activation, down projection on `rows` tokens, each matrix split `width_split` ways over the
    inner size (tp for a dense MLP, etp for experts); `groups` experts share the rows (a grouped GEMM). `sp_ways`:
    the block's input is all-gathered from, and its output reduce-scattered to, that many sequence-parallel ranks
    (ops.linear); the up projection keeps the rank's rows / sp_ways of its input (backward re-gathers them).
    `sent_quantized`: the input arrives already quantized from rows / sent_quantized tokens, and the output
    gradient leaves the same way (an FP8 expert dispatch, `fp8_dispatch_ways`): quantized where it is sent, as
    ops.linear prices a gathered input, the up projection keeping the copies it received."""
    up = (2 if model.ffn_act == "swiglu" else 1) * ffn / width_split
    act = activation_op(model, plan, rows * ffn / width_split, f"{prefix}_act", act_keep_bytes)
    return (linear(f"{prefix}_up", plan, rows, model.hidden, up, groups=groups, fused_input=fused_input,
                   saved_rows=rows / sp_ways, gathered_in=sp_ways * sent_quantized)
            + [act] + linear(f"{prefix}_down", plan, rows, ffn / width_split, model.hidden, groups=groups,
                             scattered_out=sp_ways * sent_quantized))


def fp8_dispatch_ways(model: Model, plan: Plan, rows: float) -> float:
    """Expert rows per token the rank sends when the dispatch quantizes each token once before sending it and the
    combine's backward each token's gradient once (plan.ep_dispatch_format `fp8`, DeepSeek-V3 §3.3.2; the expert
    GEMMs read the received FP8 copies, a per-tensor FP8 weight gradient the transpose of them) — 1 otherwise, and
    for the block-scaled recipes, whose column-wise copy the one FP8 copy sent cannot give (their casts stay on
    the copies)."""
    if plan.ep_dispatch_format != "fp8" or plan.ep <= 1 or plan.precision != "fp8":
        return 1.0
    return rows / local_tokens(model, plan)  # ≥ 1: top_k, etp, the busiest share and a capacity factor all ≥ 1


LEARNED_EXPERT_LOAD_CV = 1.28
"""Coefficient of variation of the token copies a trained router sends to each expert when nothing balances it
(inference: auxiliary losses act only in training, and no expert load balancer runs by default). Measured for
DeepSeek-R1 on a machine-translation data set at inference, EP 32 on GB200, no EPLB: 164.1 / 128 copies per expert
slot (std / mean, averaged over layers and iterations; NVIDIA TensorRT-LLM tech blog 4, 'Scaling Expert Parallelism
in TensorRT-LLM, Part 1', Table 1). The same table's rank loads check how it composes (learned_rank_cv2): 8 experts
per rank give a rank CV of 0.447 against the 0.480 measured (491.6 / 1024)."""


FINE_GRAINED_EXPERTS = 64
"""Routed experts from which a router counts as fine-grained (DeepSeekMoE's fine expert segmentation: many small
experts, several chosen per token, each specialising), the kind LEARNED_EXPERT_LOAD_CV was measured on (256
experts). Coarse routers of 8–16 large experts (Mixtral, Llama 4 Scout, DBRX, Grok-1) spread broad token classes
over few experts; no measurement of their skew at inference was found, so they keep random assignment."""


def router_load_cv(num_experts: int) -> float:
    """Spread of a trained router's load over its experts at inference, no balancer: LEARNED_EXPERT_LOAD_CV for a
    fine-grained router (FINE_GRAINED_EXPERTS), else 0 (not measured; random assignment only)."""
    return LEARNED_EXPERT_LOAD_CV if num_experts >= FINE_GRAINED_EXPERTS else 0.0


def learned_rank_cv2(num_experts: int, ep: int, expert_cv: float = LEARNED_EXPERT_LOAD_CV) -> float:
    """Squared coefficient of variation of one expert-parallel rank's load that learned routing adds: the rank
    holds k = num_experts/ep experts whose loads vary with `expert_cv` about a common mean, a sample of k of the
    num_experts without replacement, so cv² · (E − k) / (k · (E − 1)); 0 when one rank holds every expert."""
    if ep <= 1:
        return 0.0
    k = num_experts / ep
    return expert_cv ** 2 * (num_experts - k) / (k * (num_experts - 1))


def busiest_rank_factor(ep: int, copies_per_rank: float, skew_cv2: float = 0.0) -> float:
    """Busiest of `ep` ranks' load over the mean when each receives `copies_per_rank` token copies on average:
    1 + √(2·ln ep · cv²), the expected maximum of ep loads of coefficient of variation cv (Gaussian tail; Raab &
    Steger 1998 for the random part), cv² = 1/n of random assignment plus `skew_cv2` of a skewed router
    (learned_rank_cv2). Against TensorRT-LLM blog 4's DeepSeek-R1 EP 32 table the bound gives 2.18 for a measured
    2.56 (hot experts make the tail heavier than Gaussian): it errs on the fast side."""
    if ep <= 1 or copies_per_rank <= 0:
        return 1.0
    return 1.0 + math.sqrt(2.0 * math.log(ep) * (1.0 / copies_per_rank + skew_cv2))


def routing_imbalance(plan: Plan, copies_per_rank: float) -> float:
    """Busiest expert-parallel rank's expert rows over the mean (see module docstring)."""
    if plan.moe_routing == "token-drop":
        return 1.0
    return busiest_rank_factor(plan.ep, copies_per_rank)


def local_tokens(model: Model, plan: Plan) -> float:
    """Tokens a rank owns going into the MoE layer (the sequence-parallel shard)."""
    tokens = plan.mbs * model.seq_len / plan.cp
    return tokens / plan.tp if plan.sequence_parallel or plan.tp == 1 else tokens


def permute_traffic(model: Model, plan: Plan, tok: float, rows: float) -> tuple[float, int]:
    """(HBM bytes of putting one micro-batch's copies in expert order on one rank, sorts of received chunks: 0 or 1).

    Megatron-Core's all-to-all dispatcher permutes the rank's own `tok` tokens into `tok·top_k` copies (fused:
    read the tokens, write the copies) before the exchange and, holding more than one expert, sorts the received
    chunks from source-rank order into expert order after it (`sort_chunks_by_idxs`: read and write every received
    row, `rows`, after the etp gather) — and the reverse before the combine (token_dispatcher.py
    `MoEAlltoAllTokenDispatcher`; its fused Triton map and sort: 2 launches forward and 1 backward on the dispatch
    side, 3 and 1 on the combine's). The flex dispatcher (`dedup`: DeepEP) sends each token once to every rank
    holding any of its experts and permutes what it receives (`ranks_per_token` tokens for each of its own, expert
    order: `get_permuted_hidden_states_by_experts`) into the copies; no sort. Without expert parallelism: the
    permute alone. The node limit's fewer ranks per token (`moe.max_nodes`) is not applied here (it needs the ep
    group's span): the received tokens are the unlimited count, ~3 % more for DeepSeek-V3 on 8 nodes."""
    moe, h, A = model.moe, model.hidden, act_bytes(plan)
    copies = tok * moe.top_k
    if plan.ep > 1 and plan.ep_dispatch == "dedup":
        recv = tok * ranks_per_token(moe.num_experts, moe.top_k, plan.ep)
        return (recv + copies) * h * A, 0
    if plan.ep > 1 and local_experts(moe, plan) > 1:
        return (tok + copies + 2 * rows) * h * A, 1
    return (tok + copies) * h * A, 0


def expert_rows(model: Model, plan: Plan) -> float:
    """Expert GEMM rows this rank runs per micro-batch and layer, including the routing imbalance."""
    moe = model.moe
    mean = local_tokens(model, plan) * moe.top_k * plan.expert_tp
    if plan.moe_routing == "token-drop":
        return mean * moe.capacity_factor
    return mean * routing_imbalance(plan, mean)


def dense_mlp_block_ops(model: Model, plan: Plan) -> list[Op]:
    """Norm, dense MLP (inner size model.ffn, tp-sharded), residual."""
    A = act_bytes(plan)
    b, s, t, h = plan.mbs, model.seq_len // plan.cp, plan.tp, model.hidden
    m = b * s
    E_norm = m * h / t if plan.sequence_parallel else m * h
    ops = [norm_op("ln2", plan, E_norm)]
    ops += mlp_ops(model, plan, model.ffn, m, width_split=t, sp_ways=t if plan.sequence_parallel else 1)
    ops.append(residual_op(model, E_norm, A, plan.precision))
    return ops


ROUTER_BWD_KERNELS = 6
"""Launches of the router's backward after its gating GEMM: the fused top-k's backward and the auxiliary loss's
(its gradient scaled, the loss's and the scores' backward, the two logits gradients summed) — Megatron-Core 0.16
router.py / moe_utils.py with `moe_router_fusion`, as Megatron-Bridge's MoE recipes set it."""


def router_kernels(plan: Plan) -> int:
    """Launches of the router's forward after its gating GEMM (Megatron-Core 0.16 with `moe_router_fusion`): the fused
    top-k with its score function (1), the auxiliary load-balancing loss — Megatron-Core's default `aux_loss` —
    (fused scores, tokens per expert, fused loss, the coefficient's division, the tracker's sum: 5), and under
    forced balancing (`dropless-balanced`: RandomSTE's `clone().normal_()` of the logits) 2 more."""
    return 6 + (2 if plan.moe_routing == "dropless-balanced" else 0)


def moe_block_ops(model: Model, plan: Plan) -> list[Op]:
    """Norm, router, permute, routed experts (grouped GEMMs), unpermute, shared experts, residual."""
    moe = model.moe
    A = act_bytes(plan)
    b, s, t, h = plan.mbs, model.seq_len // plan.cp, plan.tp, model.hidden
    E_norm = b * s * h / t if plan.sequence_parallel else b * s * h
    tok = local_tokens(model, plan)
    copies = tok * moe.top_k
    ops = [norm_op("ln2", plan, E_norm)]
    # router: logits of every expert in 16 bit, softmax / top-k / aux statistics in fp32 (keeps the probabilities)
    ops.append(gemm("router", "fwd", tok, h, moe.num_experts, core_dtype(plan), A, A,
                    saved_bytes=tok * h * A))
    topk = vector("router_topk", "fwd", 3 * tok * moe.num_experts * 4, "fp32", kernels=router_kernels(plan),
                  saved_bytes=tok * moe.num_experts * 4, bwd_kernels=ROUTER_BWD_KERNELS)
    if plan.moe_routing != "token-drop" and not plan.moe_sync_free:  # dropless: the host needs the tokens-per-expert
        # counts to size the all-to-all and the grouped GEMMs (Megatron-Core's MoEAlltoAllTokenDispatcher copies them
        # to the CPU) unless the kernels read them from device memory (plan.moe_sync_free)
        topk = dataclasses.replace(topk, host_syncs=1)
    ops.append(topk)
    # permute: the copies put in expert order (permute_traffic); its backward is the inverse permutation of the
    # gradients: the same bytes
    rows = expert_rows(model, plan)
    perm, sorts = permute_traffic(model, plan, tok, rows)
    ops.append(vector("moe_permute", "fwd", perm, plan.precision, kernels=2 + 2 * sorts, bwd_bytes=perm,
                      bwd_kernels=2 + sorts))
    ops += expert_path_ops(model, plan, rows, mlp_ops(
        model, plan, moe.expert_ffn, rows, width_split=plan.expert_tp, prefix="expert",
        groups=local_experts(moe, plan), fused_input=False, act_keep_bytes=cached_bytes(plan, "swiglu_input"),
        sent_quantized=fp8_dispatch_ways(model, plan, rows)))
    # unpermute: sum the copies back into the token; where it also weights each copy by its routing probability
    # (plan.moe_probs `combine`) it keeps the 16-bit expert outputs for the probabilities' gradient, where the
    # experts' activation already did (`activation`, Megatron-Core >= 0.13) it keeps only indices
    # (backward: the gradient permuted back to the copies, the same bytes, and with `combine` the kept outputs read
    # for the probabilities' gradient)
    kept = copies * h * A if plan.moe_probs == "combine" else 0.0
    ops.append(vector("moe_unpermute", "fwd", perm, plan.precision, kernels=2 + 3 * sorts, saved_bytes=kept,
                      bwd_bytes=perm + kept, bwd_kernels=2 + sorts))
    if moe.shared_experts:
        m = b * s
        ops += mlp_ops(model, plan, moe.shared_ffn * moe.shared_experts, m, width_split=t, prefix="shared",
                       sp_ways=t if plan.sequence_parallel else 1)
    ops.append(residual_op(model, E_norm, A, plan.precision))
    return ops


def local_experts(moe: MoE, plan: Plan) -> int:
    """Routed experts one rank holds: num_experts / ep (Megatron-Core's num_local_experts), at least one."""
    return max(1, moe.num_experts // plan.ep)


def expert_path_ops(model: Model, plan: Plan, rows: float, experts: list[Op]) -> list[Op]:
    """The experts' ops with what Megatron-Core's path adds for a clamped GLU and expert biases (GPT-OSS; read from
    megatron/core/fusions/fused_bias_geglu.py `weighted_bias_quick_geglu_impl` and megatron/core/transformer/moe/
    experts.py `TEGroupedMLP`, Megatron-Core 0.14–0.16; Transformer Engine's fused grouped MLP takes only SiLU GLUs):
    - a clamped GLU (`moe.glu_clamp`) splits the up projection's [rows, 2·ffn] output, clamps both halves and
      concatenates them again before the activation kernel — two clamps and a cat, 4·rows·ffn elements read and
      as many written — keeping the clamps' inputs for backward, and builds the linear offset as
      `torch.tensor(offset, device=...)` on every call: a blocking host-to-device copy, one host synchronisation
      per forward (and per recompute);
    - expert biases (`moe.expert_bias`): the second projection's bias is added after the grouped GEMM per local
      expert in Python (`_apply_bias`: the rows split by expert, b·p and t + b·p per expert, a cat), 2E + 1 kernels
      over ~3·rows·hidden elements read and written (the first projection's bias is added inside its grouped GEMM:
      `linear_fc1` is built with skip_bias_add=False).
    Their backward is the source's autograd graph (`Op.bwd_bytes`, `Op.bwd_kernels`); `moe_act` recompute runs the clamp
    again (workload.recompute); with CUDA graphs the host-to-device copy keeps the expert path eager
    (workload.build.EXPERT_PATH). Serving ignores both fields: inference engines fuse them into their MoE kernels."""
    moe = model.moe
    if not moe.glu_clamp and not moe.expert_bias:
        return experts
    A = act_bytes(plan)
    ffn = moe.expert_ffn / plan.expert_tp
    out = []
    for op in experts:
        if op.name == "expert_act" and moe.glu_clamp:
            # backward: PyTorch's clamp_backward masks each half's gradient (the two-sided clamp: ge, le,
            # logical_and, where; the one-sided: le, where) and chunk's backward concatenates them — ~15·R·F
            # elements over 7 kernels
            out.append(dataclasses.replace(
                vector("expert_act_clamp", "fwd", 8 * rows * ffn * A, plan.precision, kernels=3,
                       saved_bytes=2 * rows * ffn * A), host_syncs=1, bwd_bytes=15 * rows * ffn * A, bwd_kernels=7))
        out.append(op)
    if moe.expert_bias:
        local = local_experts(moe, plan)
        # backward: per expert grad·p and its sum (the bias gradient), grad·b and its sum (the probabilities'):
        # ~6·R·h elements over 4E kernels
        nbytes = 6 * rows * model.hidden * A
        out.append(vector("expert_bias", "fwd", nbytes, plan.precision, kernels=2 * local + 1, bwd_bytes=nbytes,
                          bwd_kernels=4 * local))
    return out


def distinct_expert_ranks(num_experts: int, top_k: int, ep: int) -> float:
    """Expected expert-parallel ranks one token's top_k distinct experts lie on (E/ep experts per rank):
    ep · (1 − C(E − E/ep, k) / C(E, k))."""
    if ep <= 1:
        return 1.0
    per = num_experts / ep
    if num_experts - per < top_k:
        return float(ep)

    def lc(n: float, k: int) -> float:
        return math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)

    return ep * (1.0 - math.exp(lc(num_experts - per, top_k) - lc(num_experts, top_k)))


def ranks_per_token(num_experts: int, top_k: int, ep: int, domains: int = 1, max_nodes: int = 0) -> float:
    """Expert-parallel ranks a deduplicating dispatch sends one token to — once to each rank holding any of its
    experts, which permutes the copies for its experts itself (DeepEP's `is_token_in_rank`; Megatron-Core's flex
    dispatcher permutes after the exchange with `tokens_per_expert`): `distinct_expert_ranks`; with node-limited
    routing to M < D nodes the token's experts are drawn from the M nodes it picks, whose E·M/D experts lie on
    ep·M/D ranks (a limit of D nodes or more restricts nothing). Qwen3-30B-A3B (128 experts, top 8) on ep 8: 5.34
    ranks, not 8 copies; DeepSeek-V3 on ep 64 over 8 nodes, M = 4: 7.36."""
    if domains > 1 and 0 < max_nodes < domains:
        return distinct_expert_ranks(num_experts * max_nodes / domains, top_k, ep * max_nodes / domains)
    return distinct_expert_ranks(num_experts, top_k, ep)


def remote_nodes_per_token(top_k: int, domains: int, max_nodes: int = 0) -> float:
    """Expected number of other scale-up domains a token's top_k experts fall on, experts spread evenly over
    `domains` domains: the token's experts touch N = D·(1 − (1 − 1/D)^k) domains under independent uniform picks,
    at most M = max_nodes with node-limited routing, and its own domain is one of them with probability N/D (the
    router does not know where the token lives: DeepSeek-V3 §2.1.2 picks the M nodes by the affinity of their
    experts), so min(N, M)·(1 − 1/D) — unconstrained, (D − 1)·(1 − (1 − 1/D)^k). DeepSeek-V3 over 8 domains:
    N = 5.25 > M = 4, 3.5 remote nodes (3.2 if a chosen node could hold none of the token's 8 experts)."""
    if domains <= 1:
        return 0.0
    hit = domains * (1.0 - (1.0 - 1.0 / domains) ** top_k)
    return (min(hit, max_nodes) if max_nodes else hit) * (1.0 - 1.0 / domains)


def moe_transfers(model: Model, plan: Plan, ep_domains: int = 1, ep_per_domain: int = 1
                  ) -> list[tuple[Transfer, float]]:
    """Expert-parallel traffic of one MoE layer per micro-batch: dispatch and combine of the token copies in forward
    and backward (and a full recompute's forward); with etp > 1 the dispatched tokens are all-gathered over the etp
    ranks and the expert outputs reduce-scattered back. Overlapped with another micro-batch's computation when
    `plan.ep_overlap` (Megatron-Core 1F1B A2A overlap, DeepSeek DualPipe).

    `all_to_all` dispatch: one NCCL all-to-all of every token-expert copy on the ep group. `dedup` dispatch over an
    ep group of `ep_domains` scale-up domains × `ep_per_domain` ranks: each token crosses the scale-out tier once
    per destination domain (remote_nodes_per_token: an all-to-all among the ranks with the same local index,
    `ep_inter`) and its copies are fanned out inside the domain over NVLink (`ep_intra`). The dispatched copies
    (and the etp gather of them) move in the plan's `ep_dispatch_format` (`_exchange`), the combine in 16 bit."""
    moe = model.moe
    A = act_bytes(plan)
    phases = ("fwd", "bwd") + (("recompute",) if recomputes_dispatch(plan) else ())
    out: list[tuple[Transfer, float]] = []
    tok = local_tokens(model, plan)
    if plan.ep > 1 and plan.ep_dispatch == "dedup":
        # each token once to every rank holding any of its experts: the whole exchange inside one domain, the NVLink
        # leg after a crossing per destination node (nccl-tests all-to-all size whose off-domain share (D − 1)/D is
        # the deduplicated scale-out traffic) across several
        fanned = tok * ranks_per_token(moe.num_experts, moe.top_k, plan.ep, ep_domains, moe.max_nodes) * model.hidden
        if ep_domains == 1:
            legs = [("", "ep", fanned)]
        else:
            remote = remote_nodes_per_token(moe.top_k, ep_domains, moe.max_nodes)
            legs = [("_internode", "ep_inter", tok * remote * model.hidden * ep_domains / (ep_domains - 1))]
            legs += [("_intranode", "ep_intra", fanned)] if ep_per_domain > 1 else []
        for ph in phases:
            for leg, axis, elements in legs:
                out += _exchange(plan, leg, axis, elements, ph)
    elif plan.ep > 1:
        for ph in phases:
            out += _exchange(plan, "", "ep", tok * moe.top_k * model.hidden, ph)
    if plan.expert_tp > 1:
        gathered = tok * moe.top_k * plan.expert_tp * model.hidden
        sent = dispatch_bytes(plan) if plan.ep > 1 else A  # the dispatched copies; without ep nothing was sent
        for ph in phases:
            out.append((Transfer("ep.expert_tp_all_gather", "all_gather", "etp", gathered * sent, ph,
                                 plan.ep_overlap, _PAIR), 1.0))
            out.append((Transfer("ep.expert_tp_reduce_scatter", "reduce_scatter", "etp", gathered * A, ph,
                                 plan.ep_overlap, _PAIR), 1.0))
    return out


TOKEN_COUNT_BYTES = 8
"""Bytes of one expert's token count: Megatron-Core's all-to-all dispatcher all-gathers every rank's int64 tokens per
expert over the ep group before its all-to-all (MoEAlltoAllTokenDispatcher.preprocess,
gather_from_sequence_parallel_region on the tp×ep group), then copies them to the host to size it; DeepEP's notify
step exchanges the same counts among the ranks before its dispatch. A latency-bound exchange on every layer's
forward path, never hidden (the host waits for its result)."""

_PAIR = "pass_pair"
"""What an overlapped exchange hides behind: the merged pass of another micro-batch (Transfer.hides_behind)."""


def token_count_transfers(model: Model, plan: Plan) -> list[tuple[Transfer, float]]:
    """Each rank's tokens per expert gathered over the ep group before the tokens move (TOKEN_COUNT_BYTES), in
    every forward of an MoE layer (and a recompute that runs the dispatch again); none without expert
    parallelism."""
    if plan.ep <= 1 or model.moe is None:
        return []
    phases = ("fwd",) + (("recompute",) if recomputes_dispatch(plan) else ())
    size = model.moe.num_experts * TOKEN_COUNT_BYTES * plan.ep
    return [(Transfer("ep.token_counts", "all_gather", "ep", size, ph), 1.0) for ph in phases]


def _exchange(plan: Plan, leg: str, axis: str, elements: float, phase: str) -> list[tuple[Transfer, float]]:
    """One pass's dispatch and combine of `elements` token-copy elements on `axis`: one 16-bit all-to-all run twice
    (`ep.dispatch_combine`), or under DeepSeek-V3's FP8 dispatch (plan.ep_dispatch_format) an FP8 all-to-all
    (`ep.dispatch`: the forward dispatch, and in backward the combine's gradient on its way to the down-projection)
    beside a 16-bit one (`ep.combine`: the forward combine, the dispatch's gradient)."""
    A = act_bytes(plan)
    if plan.ep_dispatch_format != "fp8":
        return [(Transfer("ep.dispatch_combine" + leg, "all_to_all", axis, elements * A, phase, plan.ep_overlap,
                          _PAIR), 2.0)]
    return [(Transfer("ep.dispatch" + leg, "all_to_all", axis, elements * dispatch_bytes(plan), phase,
                      plan.ep_overlap, _PAIR), 1.0),
            (Transfer("ep.combine" + leg, "all_to_all", axis, elements * A, phase, plan.ep_overlap, _PAIR), 1.0)]


def expert_params(model: Model, plan: Plan) -> float:
    """Routed-expert parameters of one MoE layer held by one rank (num_experts/ep experts, split etp ways)."""
    if model.moe is None:
        return 0.0
    moe = model.moe
    return (moe.num_experts / plan.ep) * model.mlp_matrices * model.hidden * moe.expert_ffn / plan.expert_tp


def moe_layer_params(model: Model, plan: Plan) -> float:
    """MLP-half parameters of one MoE layer on one rank: routed experts, shared experts (tp-sharded), router."""
    moe = model.moe
    shared = moe.shared_experts * model.mlp_matrices * model.hidden * moe.shared_ffn / plan.tp
    return expert_params(model, plan) + shared + model.hidden * moe.num_experts
