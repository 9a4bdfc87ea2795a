"""Communication of one serving iteration on one GPU: what crosses which parallel group per layer, per stage
boundary and per generated token. No timing here (schedule.serving_cost prices these with cost.collectives on
the groups' spans).

Per layer at T tokens of one attention-DP rank (A = 2 bytes, h hidden, t = tp, messages in the nccl-tests
convention of cost.collectives):
- tensor parallelism: an all-reduce of T·h·A after the attention output projection and one after the MLP (one in
  all for a parallel attention+MLP block) (Shoeybi et al. 2019, Megatron-LM §3);
- routed experts spread over the tp·dp GPUs of a stage (ep > 1 or dp > 1): each GPU takes T/t of its rank's tokens;
  with ep > 1 it sends each token once to every expert-parallel rank holding one of its top_k experts (dispatch,
  in the GEMM format: TensorRT-LLM / DeepEP quantize before dispatch) and receives the expert outputs back
  (combine, 16 bit) — an all-to-all on the ep group; a token's k experts, drawn without replacement from E, lie
  on ep·(1 − C(E − E/ep, k)/C(E, k)) distinct ranks. With expert tensor parallelism etp > 1 the received rows are
  all-gathered over the etp group and the outputs reduce-scattered back (Megatron-Core MoE layout); with ep = 1
  the tokens themselves are all-gathered over the whole stage (TensorRT-LLM attention DP + MoE TP). A `dedup`
  dispatch over several domains sends each token once per destination node over the fabric (at most the model's
  `max_nodes` with node-limited routing, DeepSeek-V3 §2.1.2) and fans it out over NVLink (DeepEP), as training's. With tp > 1
  the tp-split shared experts' partial sums are reduce-scattered onto the ranks' T/t tokens (TensorRT-LLM's
  DeepseekV3MoE reduces shared + routed output over tp) and the MoE output is then all-gathered over tp. With
  ep = dp = 1 the experts are split like a dense MLP and end in the tp all-reduce;
- `gather` exchange (TensorRT-LLM's fused MoE on one scale-up domain, 1.x before wide EP): no all-to-all. With
  attention data parallelism every GPU all-gathers the tokens of all dp ranks in the GEMM format (FP8 / FP4
  quantized before the gather: 'FP4 AllGather', NVIDIA TensorRT-LLM tech blog 3, 'Optimizing DeepSeek R1 Throughput
  on NVIDIA Blackwell GPUs'), runs its experts (or expert slices) on the copies routed to them, and reduce-scatters
  the 16-bit outputs back (CutlassFusedMoE: allgather before, reducescatter after the fused MoE op), which sums
  the GPUs of one tp index — with tp > 1 as well a tp all-reduce of the partial sums; with attention tensor
  parallelism the tokens are already on every GPU and the partial outputs are all-reduced as a dense MLP's;
- pipeline parallelism: the T·h·A activations to the next stage once per iteration (send/recv);
- the output layer's vocabulary-parallel logits are all-gathered over tp (rows·V·A).
"""
from __future__ import annotations

from narrowpath.spec.model import Model
from narrowpath.spec.serving import ServingPlan
from narrowpath.workload.items import Transfer
from narrowpath.workload.moe import distinct_expert_ranks, ranks_per_token, remote_nodes_per_token
from narrowpath.workload.serving import ACT_BYTES, Formats


EXCHANGES = ("all_to_all", "gather")
"""How routed tokens reach the experts (module docstring): an all-to-all of the token copies on the ep group
(Megatron-Core, DeepEP, vLLM / SGLang expert parallelism) or TensorRT-LLM's all-gather + reduce-scatter."""


def layer_transfers(model: Model, plan: ServingPlan, f: Formats, T: float, moe_layer: bool, ep_domains: int = 1,
                    ep_per_domain: int = 1, exchange: str = "all_to_all") -> list[tuple[Transfer, float]]:
    """(transfer, count) pairs of one layer at T tokens (module docstring). `ep_domains` × `ep_per_domain`: how the
    ep group lies on scale-up domains, for a deduplicating dispatch; `exchange`: EXCHANGES."""
    A, h, t = ACT_BYTES, model.hidden, plan.tp
    out: list[tuple[Transfer, float]] = []
    if T <= 0:
        return out
    experts_spread = moe_layer and (plan.ep > 1 or plan.dp > 1)
    gather = exchange == "gather" and experts_spread
    if gather and plan.dp == 1:  # tokens replicated over tp: the experts' partial sums end in an all-reduce
        experts_spread = gather = False
    if t > 1:
        n_ar = 1 if model.parallel_attn_mlp or experts_spread else 2
        out.append((Transfer("tp.all_reduce", "all_reduce", "tp", T * h * A, "fwd"), float(n_ar)))
    if gather:
        out.append((Transfer("dp.moe_all_gather", "all_gather", "dp", T * plan.dp * h * f.W, "fwd"), 1.0))
        out.append((Transfer("dp.moe_reduce_scatter", "reduce_scatter", "dp", T * plan.dp * h * A, "fwd"), 1.0))
        if t > 1:  # the reduce-scatter sums the experts of one tp index; the tp ranks' partial sums still add up
            out.append((Transfer("tp.moe_all_reduce", "all_reduce", "tp", T * h * A, "fwd"), 1.0))
        return out
    if not experts_spread:
        return out
    moe = model.moe
    T_g = T / t
    if plan.ep > 1 and plan.ep_dispatch == "dedup" and ep_domains > 1:
        # as training's deduplicating dispatch (workload.moe.moe_transfers): once per destination node over the
        # fabric (an all-to-all among the ranks of one local index, whose off-domain share (D − 1)/D is that
        # traffic), then the copies fanned out inside the domain
        remote = remote_nodes_per_token(moe.top_k, ep_domains, moe.max_nodes)
        hits = ranks_per_token(moe.num_experts, moe.top_k, plan.ep, ep_domains, moe.max_nodes)
        for name, b in (("dispatch", f.W), ("combine", A)):
            out.append((Transfer(f"ep.{name}_internode", "all_to_all", "ep_inter",
                                 T_g * remote * h * b * ep_domains / (ep_domains - 1), "fwd"), 1.0))
            if ep_per_domain > 1:
                out.append((Transfer(f"ep.{name}_intranode", "all_to_all", "ep_intra", T_g * hits * h * b,
                                     "fwd"), 1.0))
        gathered = T_g * moe.top_k * plan.expert_tp * h * A
    elif plan.ep > 1:
        d = distinct_expert_ranks(moe.num_experts, moe.top_k, plan.ep)
        out.append((Transfer("ep.dispatch", "all_to_all", "ep", T_g * d * h * f.W, "fwd"), 1.0))
        out.append((Transfer("ep.combine", "all_to_all", "ep", T_g * d * h * A, "fwd"), 1.0))
        gathered = T_g * moe.top_k * plan.expert_tp * h * A
    else:
        gathered = T_g * plan.expert_tp * h * A
    if plan.expert_tp > 1:
        out.append((Transfer("etp.all_gather", "all_gather", "etp", gathered, "fwd"), 1.0))
        out.append((Transfer("etp.reduce_scatter", "reduce_scatter", "etp", gathered, "fwd"), 1.0))
    if t > 1:
        if moe.shared_experts:  # the tp-split shared experts' partial sums, reduced onto each rank's T/t tokens
            out.append((Transfer("tp.shared_reduce_scatter", "reduce_scatter", "tp", T * h * A, "fwd"), 1.0))
        out.append((Transfer("tp.moe_all_gather", "all_gather", "tp", T * h * A, "fwd"), 1.0))
    return out


def stage_boundary_transfer(model: Model, T: float) -> Transfer:
    """Activations of T tokens handed to the next pipeline stage."""
    return Transfer("pp.activations", "send_recv", "pp", T * model.hidden * ACT_BYTES, "fwd")


def logits_transfer(model: Model, plan: ServingPlan, rows: float) -> Transfer | None:
    """All-gather of the vocabulary-parallel logits of `rows` sequences over tp (None without tp)."""
    if plan.tp <= 1 or rows <= 0:
        return None
    return Transfer("tp.logits_all_gather", "all_gather", "tp", rows * model.vocab * ACT_BYTES, "fwd")


def kv_handoff_bytes_per_gpu(kv_bytes_per_token_gpu: float, prompt_tokens: float,
                             receiver_kv_bytes_per_token_gpu: float | None = None) -> float:
    """Disaggregated serving: KV cache bytes the busiest GPU of a hand-off moves for one prompt. Same layout on both
    sides: each prefill GPU sends its own shard to its counterpart in the decode instance, in parallel (Zhong et al.
    2024, DistServe §3; Patel et al. 2024, Splitwise). Layouts that differ (an attention-DP prefill rank holding a
    request's whole KV on one GPU, a tensor-parallel decode instance spreading it over tp): every sender's and
    every receiver's port works in parallel, so the side holding more of the prompt per GPU bounds the transfer."""
    recv = kv_bytes_per_token_gpu if receiver_kv_bytes_per_token_gpu is None else receiver_kv_bytes_per_token_gpu
    return max(kv_bytes_per_token_gpu, recv) * prompt_tokens
