"""Context-parallel traffic of one layer (Megatron-Core --cp-comm-type: the ring, the all-gather and the all-to-all
exchanges of the attention core's keys and values)."""
from __future__ import annotations

from narrowpath.workload.attention import kv_pair_width_per_rank
from narrowpath.workload.items import Transfer


def cp_transfers(model, plan, tokens: float, a_bytes: int, *, recompute_core: bool = False
                 ) -> list[tuple[Transfer, float]]:
    """Context-parallel traffic of one layer and micro-batch on one rank (`tokens` = b·s/cp local tokens), by
    `plan.cp_comm` (Megatron-Core --cp-comm-type). A recompute pass that re-runs the attention core needs the
    remote K, V again: a full recompute, or a selective one of the core (`recompute_core`: the checkpointed
    attention function runs whole again, a2a's output all-to-all with it, Transformer Engine's
    AttnFuncWithCPAndQKVOA2A):
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
    # K and V widths a tp rank holds (a whole head when tp exceeds the kv heads, as attention_ops counts; MLA's
    # up-projected per-head keys and values)
    kv_w2 = kv_pair_width_per_rank(model, plan.tp)
    if plan.cp_comm == "a2a":
        q_w = model.heads / plan.tp * model.qk_head_dim
        qkv = tokens * (q_w + kv_w2) * a_bytes
        out = tokens * model.q_dim / plan.tp * a_bytes
        return [(Transfer(f"cp.{what}_all_to_all", "all_to_all", "cp", size, ph, False), 1.0)
                for ph in phases for what, size in (("qkv", qkv), ("attn_out", out))]
    kv = tokens * kv_w2 * a_bytes * plan.cp  # gathered K and V (nccl-tests AG size)
    if plan.cp_comm == "all_gather":
        gathers = [(Transfer("cp.kv_all_gather", "all_gather", "cp", kv, ph, False), 1.0) for ph in phases]
        return gathers + [(Transfer("cp.kv_grad_reduce_scatter", "reduce_scatter", "cp", kv, "bwd", False), 1.0)]
    ring = [(Transfer("cp.kv_all_gather", "all_gather", "cp", kv, ph, True, "attention"), 1.0) for ph in phases]
    return ring + [(Transfer("cp.kv_grad_reduce_scatter", "reduce_scatter", "cp", kv, "bwd", True, "attention"),
                    1.0)]
