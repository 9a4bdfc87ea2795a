"""Golden mixture-of-experts work on one rank (Megatron-Core's MoE layer and expert layout, Liu et al. 2025 'MoE
Parallel Folding'), worked out by hand for Mixtral 8x7B (h 4096, 8 experts of f 14336, top 2, s 4096) and the
DeepSeek-V3 shape (256 experts of 2048, top 8, one shared expert)."""
from __future__ import annotations

import dataclasses
import math

import pytest

from narrowpath.catalog import model
from narrowpath.spec import Plan
from narrowpath.spec.model import MoE
from narrowpath.workload.moe import (expert_params, expert_rows, local_tokens, moe_block_ops, moe_layer_params,
                                     moe_transfers, routing_imbalance)
from narrowpath.workload.ops import backward_ops

MIXTRAL = model("mixtral-8x7b")


def P(**kw) -> Plan:
    """A plan with one micro-batch per data-parallel rank."""
    return Plan(gbs=kw.get("dp", 1) * kw.get("mbs", 1), **kw)


def test_tokens_a_rank_owns_entering_the_moe_layer():
    """b·s/cp tokens, split over tp by sequence parallelism (or when tp = 1): 2·4096/2 = 4096 with cp 2 and no
    tp; 4096/4 = 1024 with tp 4 and SP; without SP every tp rank holds all 4096."""
    assert local_tokens(MIXTRAL, P(cp=2, mbs=2)) == 4096
    assert local_tokens(MIXTRAL, P(tp=4, sequence_parallel=True)) == 1024
    assert local_tokens(MIXTRAL, P(tp=4)) == 4096


def test_routing_imbalance_is_balls_into_bins():
    """Raab & Steger 1998: n balls per bin on average over k bins, the fullest holds n + √(2·n·ln k):
    ep = 8, n = 4096 → 1 + √(2·ln 8 / 4096) = 1.0318646; ep = 4, n = 8192 → 1.0183970. Token-drop routing
    (capacity padding) and ep = 1 (one bin) have none."""
    assert routing_imbalance(P(dp=8, ep=8), 4096) == pytest.approx(1.0318646, abs=1e-7)
    assert routing_imbalance(P(dp=4, ep=4), 8192) == pytest.approx(1.0183970, abs=1e-7)
    assert routing_imbalance(P(dp=8, ep=8, moe_routing="token-drop"), 4096) == 1.0
    assert routing_imbalance(P(dp=8), 4096) == 1.0


def test_expert_rows_per_rank_by_hand():
    """Rows = local tokens × top_k × etp × (imbalance or capacity factor). Mixtral, dp 8, ep 8, 4096 tokens:
    4096·2 = 8192 copies; dropless: 8192·(1 + √(2·ln 8/8192)) = 8192 + √(2·8192·ln 8) = 8376.5…; token-drop at
    capacity factor 1.25: 10,240. With tp 2 (SP), etp 2: 2048 tokens · 2 · 2 = 8192 rows before imbalance."""
    dropless = expert_rows(MIXTRAL, P(dp=8, ep=8))
    assert dropless == pytest.approx(8192 + math.sqrt(2 * 8192 * math.log(8)), rel=1e-12)
    capped = dataclasses.replace(MIXTRAL, moe=dataclasses.replace(MIXTRAL.moe, capacity_factor=1.25))
    assert expert_rows(capped, P(dp=8, ep=8, moe_routing="token-drop")) == 10_240
    assert expert_rows(MIXTRAL, P(tp=2, dp=4, ep=4, etp=2, sequence_parallel=True,
                                     moe_routing="token-drop")) == 8192


def test_grouped_expert_gemms_by_hand():
    """DeepSeek-V3's experts on dp = ep = 64, token-drop: 4096 tokens · top 8 = 32,768 rows over 256/64 = 4 local
    experts, one grouped GEMM per matrix (8,192 rows per expert). Up (gate + up, SwiGLU) [32768 × 7168]·[7168 ×
    4096]: 2·32768·7168·4096 = 1,924,145,348,608 FLOPs; its weights, 4 experts × 7168·4096·2 B = 234,881,024 B;
    down [32768 × 2048]·[2048 × 7168] = 962,072,674,304 FLOPs. The shared expert runs on all 4096 tokens:
    2·4096·7168·4096 = 240,518,168,576 FLOPs."""
    m = model("deepseek-v3")
    ops = {op.name: op for op in moe_block_ops(m, P(dp=64, ep=64, moe_routing="token-drop"))}
    up, down = ops["expert_up"], ops["expert_down"]
    assert (up.flop, up.groups, up.weight_bytes) == (1_924_145_348_608, 4, 234_881_024)
    assert down.flop == 962_072_674_304
    assert ops["shared_up"].flop == 240_518_168_576


def test_router_permute_and_unpermute_bytes_by_hand():
    """Mixtral, 4096 tokens, A = 2: router GEMM 2·4096·4096·8 = 268,435,456 FLOPs in BF16 even under FP8; top-k
    and softmax in fp32, 3·4096·8·4 = 393,216 B, keeping the probabilities 131,072 B, in 6 launches forward (the
    fused top-k and the auxiliary loss's 5: Megatron-Core 0.16 with moe_router_fusion) and 6 backward; the
    dropless dispatcher syncs with the host once (token-drop: never). Permute reads the tokens and writes 2
    copies: 4096·4096·2 + 8192·4096·2 = 100,663,296 B; unpermute the reverse, keeping the copies 67,108,864 B when
    it weights them by the probabilities (Megatron-Core before 0.13, plan.moe_probs `combine`) and nothing when
    the experts' activation did (0.13 on: a scatter-add's backward needs only the indices)."""
    ops = {op.name: op for op in moe_block_ops(MIXTRAL, P(dp=8, ep=8, precision="fp8"))}
    assert (ops["router"].flop, ops["router"].dtype) == (268_435_456, "bf16")
    topk = ops["router_topk"]
    assert (topk.hbm_bytes, topk.kernels, topk.saved_bytes, topk.host_syncs) == (393_216, 6, 131_072, 1)
    assert topk.bwd_kernels == 6
    assert ops["moe_permute"].hbm_bytes == ops["moe_unpermute"].hbm_bytes == 100_663_296
    assert ops["moe_unpermute"].saved_bytes == 0.0
    combine = {op.name: op for op in moe_block_ops(MIXTRAL, P(dp=8, ep=8, precision="fp8", moe_probs="combine"))}
    assert combine["moe_unpermute"].saved_bytes == 67_108_864
    assert combine["moe_unpermute"].hbm_bytes == ops["moe_unpermute"].hbm_bytes
    drop = {op.name: op for op in moe_block_ops(MIXTRAL, P(dp=8, ep=8, moe_routing="token-drop"))}
    assert drop["router_topk"].host_syncs == 0


def test_expert_parallel_traffic_by_hand():
    """Dispatch and combine all-to-alls carry each rank's token copies: 4096·2·4096·2 = 67,108,864 B, twice per
    pass, in forward and backward (and a full recompute's forward). With etp 2 the dispatched copies are gathered
    over the 2 expert-tp ranks (2048 tokens·2·2·4096·2 = 67,108,864 B gathered) and the outputs reduce-scattered."""
    xf = moe_transfers(MIXTRAL, P(dp=8, ep=8, recompute="full"))
    assert [(t.op, t.phase, t.message_bytes, c) for t, c in xf] == [
        ("all_to_all", ph, 67_108_864, 2.0) for ph in ("fwd", "bwd", "recompute")]
    etp = moe_transfers(MIXTRAL, P(tp=2, dp=4, ep=4, etp=2, sequence_parallel=True))
    gathers = [(t.name, t.op, t.axis, t.phase, t.message_bytes) for t, _ in etp if t.axis == "etp"]
    assert gathers == [(f"ep.expert_tp_{op}", op, "etp", ph, 67_108_864) for ph in ("fwd", "bwd")
                       for op in ("all_gather", "reduce_scatter")]
    assert {t.name for t, _ in xf} == {"ep.dispatch_combine"}


def test_expert_and_moe_layer_parameters_per_rank_by_hand():
    """Mixtral on ep 4, etp 2: 8/4 = 2 experts per rank, each 3·4096·14336 split 2 ways: 176,160,768 parameters;
    plus the router 4096·8 = 32,768. A shared expert (DeepSeek style, f 2048) is tp-sharded: with tp 2,
    3·4096·2048/2 = 12,582,912."""
    plan = P(tp=2, dp=4, ep=4, etp=2)
    assert expert_params(MIXTRAL, plan) == 176_160_768
    assert moe_layer_params(MIXTRAL, plan) == 176_160_768 + 32_768
    shared = dataclasses.replace(MIXTRAL, moe=MoE(num_experts=8, top_k=2, expert_ffn=14336, shared_experts=1,
                                                  shared_ffn=2048))
    assert moe_layer_params(shared, plan) == 176_160_768 + 12_582_912 + 32_768


@pytest.mark.parametrize("framework,probs", [
    ("Megatron-Bridge / NeMo 25.09 container", "activation"), ("NeMo 25.07 (FP8)", "activation"),
    ("NeMo 25.04 (FP8 per-tensor current scaling)", "combine"), ("NeMo 25.02 (BF16)", "combine"),
    ("NeMo 24.07 (NeMo 1.0, Megatron-Core)", "combine"), ("", "activation")])
def test_the_combine_follows_the_megatron_core_version_of_the_stack(framework, probs):
    """Megatron-Core 0.13 moved the probabilities into the experts' activation: Megatron-Bridge and NeMo from 25.07
    run it, NeMo 24.07 (Megatron-Core 0.8) and NeMo 2 before 25.07 do not. The NeMo 2 entry for those versions
    extends the NeMo one: it keeps NeMo's other defaults (distributed optimizer, FP8 primary weights)."""
    from narrowpath.catalog.resolve import plan_with_stack_defaults
    plan, _, chosen = plan_with_stack_defaults({"dp": 8, "gbs": 8, "precision": "fp8", "framework": framework})
    assert plan.moe_probs == probs
    if framework.startswith(("NeMo 25.02", "NeMo 25.04")):
        assert (plan.zero_stage, plan.fp8_params) == (1, True)
        assert "nemo-2-mcore-0.12 stack" in dict(chosen)["zero_stage"]


@pytest.mark.parametrize("fmt, per_expert", [("fp8", 4), ("mxfp8", 1), ("nvfp4", None)])
def test_a_moe_layers_expert_casts_are_one_launch_set_per_local_expert(fmt, per_expert):
    """DeepSeek-V3 on dp = ep = 64 holds 4 experts a rank: Transformer Engine's split_quantize casts each expert's
    rows on its own (the amax zeroed, the amax, the scale and the cast in fp8; a cast in mxfp8): the experts' input
    and output-gradient casts launch 4 × 4 = 16 and 4 × 1 = 4 kernels, moving the bytes of one cast of all the rows; nvfp4's split quantize is
    grouped (2 launches). The shared expert, one GEMM a matrix, keeps one launch set (none where a norm fuses it);
    and a sync-free expert path (plan.moe_sync_free: no split sizes on the host) quantizes the grouped tensor at
    once — 4 / 1 / 2 launches, the same bytes."""
    m = model("deepseek-v3")
    plan = P(dp=64, ep=64, moe_routing="token-drop", precision=fmt)
    names = ("expert_up.quantize", "expert_down.quantize")
    ops = {op.name: op for op in moe_block_ops(m, plan)}
    one = {"fp8": 4, "mxfp8": 1, "nvfp4": 2}[fmt]
    want = 4 * per_expert if per_expert else one
    assert [ops[n].kernels for n in names] == [want, want]
    grads = {op.name: op for op in backward_ops(list(ops.values()), plan)}
    assert grads["expert_up.grad_quantize"].kernels == grads["expert_down.grad_quantize"].kernels == want
    sync_free = {op.name: op for op in moe_block_ops(m, dataclasses.replace(plan, moe_sync_free=True))}
    assert [sync_free[n].kernels for n in names] == [one, one]
    assert [sync_free[n].hbm_bytes for n in names] == [ops[n].hbm_bytes for n in names]
    free_plan = dataclasses.replace(plan, moe_sync_free=True)
    grads_free = {op.name: op for op in backward_ops(list(sync_free.values()), free_plan)}
    assert grads_free["expert_up.grad_quantize"].kernels == one
    shared = {op.name: op for op in moe_block_ops(m, plan) if op.name.startswith("shared")}
    assert shared["shared_up.quantize"].kernels in (0, one)


def test_node_limited_routing_does_not_know_the_tokens_own_node():
    """Remote domains a token's experts reach, experts spread evenly over D domains. Independent picks: k = 8 experts
    touch N = D·(1 − (1 − 1/D)^8) domains, the token's own among them with probability N/D: D = 8 → N = 5.2511,
    remote 5.2511·7/8 = 4.5947 = 7·(1 − (7/8)^8). DeepSeek-V3's node-limited routing caps N at M = 4 nodes, chosen by
    their experts' affinity whatever node holds the token, so its own is one of them 4 times in 8: remote 4·7/8 = 3.5
    (not M − 1 = 3, which would assume the own node always chosen). Over 4 domains N = 3.6 < M: 3.6·3/4 = 2.7, the cap
    does not bind; one domain has nothing remote."""
    from narrowpath.workload.moe import remote_nodes_per_token
    assert remote_nodes_per_token(8, 8) == pytest.approx(7 * (1 - (7 / 8) ** 8), rel=1e-12)
    assert remote_nodes_per_token(8, 8) == pytest.approx(4.5947, abs=1e-4)
    assert remote_nodes_per_token(8, 8, 4) == pytest.approx(3.5, rel=1e-12)
    assert remote_nodes_per_token(8, 4, 4) == pytest.approx(3 * (1 - 0.75 ** 8), rel=1e-12)
    assert remote_nodes_per_token(8, 1, 4) == 0.0
