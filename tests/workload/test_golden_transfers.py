"""Golden communication and optimizer work of one rank, by hand for Llama-3 8B (h 4096, 32 heads, 8 KV heads of
128, f 14336, s 8192) — message sizes in the nccl-tests convention (cost.collectives).

One layer on tp 2 holds attention 4096·(4096/2 + 2·1024/2) + 4096·4096/2 = 20,971,520, MLP 3·4096·14336/2 =
88,080,384 and two norms 8,192 parameters: 109,060,096."""
from __future__ import annotations

import math

import pytest

from narrowpath.catalog import model, system
from narrowpath.spec import Plan, Scenario
from narrowpath.workload.build import build_workload, cp_transfers, zero2_transfers, zero3_transfers
from narrowpath.workload.transformer import layer_params

LLAMA = model("llama3-8b")
ACT = 8192 * 4096 * 2  # one micro-batch's activations b·s·h·A = 67,108,864 B
LAYER = 109_060_096


def _wl(**kw):
    plan = Plan(**kw)
    scn = Scenario(system=system("dgx-h100"), model=LLAMA, plan=plan, num_gpus=plan.num_gpus)
    return build_workload(scn, "flash")


def _layer_xf(wl, count_layers=32):
    """Transfers of the stage divided back to one layer (the stage's counts are per layer × layers)."""
    return [(tr.name, tr.op, tr.phase, tr.message_bytes, c / count_layers) for tr, c in wl.stages[0].transfers
            if tr.axis == "tp" and not tr.name.startswith(("tp.embedding", "tp.logits", "tp.cross"))]


def test_layer_parameters_on_tp2_by_hand():
    assert layer_params(LLAMA, Plan(tp=2)) == LAYER


def test_tensor_parallel_traffic_per_layer_with_sequence_parallelism():
    """Korthikanti et al. 2022 §4.2.2: with SP each of the attention and MLP blocks is entered by an all-gather and
    left by a reduce-scatter of the b·s·h activations (67,108,864 B), in forward and again in backward, where the
    column-parallel GEMMs also re-gather their input for the weight gradient (asynchronously)."""
    xf = _layer_xf(_wl(tp=2, sequence_parallel=True))
    fwd = [("tp.all_gather", "all_gather", "fwd", ACT, 2.0), ("tp.reduce_scatter", "reduce_scatter", "fwd", ACT, 2.0)]
    bwd = [("tp.all_gather", "all_gather", "bwd", ACT, 2.0), ("tp.reduce_scatter", "reduce_scatter", "bwd", ACT, 2.0),
           ("tp.wgrad_input_all_gather", "all_gather", "bwd", ACT, 2.0)]
    assert xf == fwd + bwd


def test_tensor_parallel_traffic_per_layer_without_sequence_parallelism():
    """Megatron-LM (Shoeybi et al. 2019 §3): two all-reduces of b·s·h per layer in forward (after attention and
    after the MLP), two in backward (the conjugate f operators)."""
    xf = _layer_xf(_wl(tp=2))
    assert xf == [("tp.all_reduce", "all_reduce", "fwd", ACT, 2.0), ("tp.all_reduce", "all_reduce", "bwd", ACT, 2.0)]


def test_context_parallel_ring_traffic_by_hand():
    """cp 2, tp 2: 8192/2 = 4096 local tokens; K and V of 8/2 heads of 128 on a tp rank: 1024 elements per token;
    the ring passes all cp ranks' K, V: 4096·1024·2 B·2 = 16,777,216 B (the gathered size) in forward and again
    in backward, plus the reduce-scatter of their gradients, each hidden behind the attention blocks."""
    plan = Plan(tp=2, cp=2)
    xf = cp_transfers(LLAMA, plan, 4096, 2)
    assert [(t.op, t.phase, t.message_bytes, t.overlappable, t.hides_behind) for t, _ in xf] == [
        ("all_gather", "fwd", 16_777_216, True, "attention"), ("all_gather", "bwd", 16_777_216, True, "attention"),
        ("reduce_scatter", "bwd", 16_777_216, True, "attention")]


def test_context_parallel_all_to_all_traffic_by_hand():
    """DeepSpeed-Ulysses (cp_comm a2a), cp 2, tp 2, 4096 local tokens: Q of 16 heads·128 = 2048 plus K, V 1024
    elements per token: 4096·3072·2 = 25,165,824 B before attention, the output 4096·2048·2 = 16,777,216 B after
    it, in forward and backward, exposed. KV all-gather (Llama 3 §3.3.2): the 16,777,216 B gathered, exposed."""
    a2a = cp_transfers(LLAMA, Plan(tp=2, cp=2, cp_comm="a2a"), 4096, 2)
    assert [(t.op, t.phase, t.message_bytes, t.overlappable) for t, _ in a2a] == [
        ("all_to_all", "fwd", 25_165_824, False), ("all_to_all", "fwd", 16_777_216, False),
        ("all_to_all", "bwd", 25_165_824, False), ("all_to_all", "bwd", 16_777_216, False)]
    ag = cp_transfers(LLAMA, Plan(tp=2, cp=2, cp_comm="all_gather"), 4096, 2)
    assert [(t.op, t.phase, t.message_bytes, t.overlappable) for t, _ in ag] == [
        ("all_gather", "fwd", 16_777_216, False), ("all_gather", "bwd", 16_777_216, False),
        ("reduce_scatter", "bwd", 16_777_216, False)]


def test_zero3_gathers_weights_twice_and_reduce_scatters_fp32_gradients():
    """FSDP / ZeRO-3 per layer and micro-batch: all-gather the 16-bit weights before forward and before backward
    (109,060,096 · 2 = 218,120,192 B each), reduce-scatter the fp32 gradients (· 4 = 436,240,384 B)."""
    xf = zero3_transfers(Plan(tp=2, dp=4, gbs=4, zero_stage=3), LAYER, 0.0)
    assert [(t.op, t.phase, t.message_bytes, t.overlappable) for t, _ in xf] == [
        ("all_gather", "fwd", 218_120_192, True), ("all_gather", "bwd", 218_120_192, True),
        ("reduce_scatter", "bwd", 436_240_384, True)]


def test_zero3_moe_layer_splits_dense_and_expert_parameters():
    """An MoE layer under ZeRO-3 gathers its dense part over dp and its experts over the expert-dp group:
    Mixtral, dp 8, ep 4 (expert-dp 2): dense = layer − local experts, experts = 2 × 176,160,768."""
    from narrowpath.workload.transformer import layer_expert_params
    plan = Plan(dp=8, ep=4, gbs=8, zero_stage=3)
    scn = Scenario(system=system("dgx-h100"), model=model("mixtral-8x7b"), plan=plan, num_gpus=8)
    per_layer = {(t.name, t.axis): t.message_bytes for t, c in build_workload(scn, "flash").stages[0].transfers
                 if t.phase == "fwd" and "zero3" in t.name and c == 32}  # (the tables' own gathers: once)
    experts = layer_expert_params(scn.model, plan)
    assert experts == 2 * 176_160_768
    dense = layer_params(scn.model, plan, moe_layer=True) - experts
    assert per_layer[("dp.zero3_param_all_gather", "dp")] == dense * 2
    assert per_layer[("dp.expert_zero3_param_all_gather", "edp")] == experts * 2


def test_zero2_reduce_scatters_in_all_but_the_last_micro_batch():
    """ZeRO-2 with 4 micro-batches: the gradient reduce-scatter after each of the first 3 backwards, 3/4 per
    micro-batch, fp16 gradients of a fp16 run (2 B/param); the 4th is the step's."""
    plan = Plan(dp=2, gbs=8, zero_stage=2, precision="fp16", dp_overlap=True)
    ((tr, c),) = zero2_transfers(plan, 1000.0, 0.0)
    assert (tr.op, tr.message_bytes, c, tr.overlappable) == ("reduce_scatter", 2000.0, 0.75, True)


def test_step_gradient_sync_and_adam_by_hand():
    """dp 4, no ZeRO, one stage: the rank holds 32 layers + both tables = 32·109,060,096 + 2·262,668,288 +
    4096 = 4,015,263,744 parameters; their fp32 gradients are all-reduced once per step
    (16,061,054,976 B). Mixed-precision Adam (ZeRO §3) reads the gradient (4) and master, m, v (12), writes
    them (12) and the 16-bit weight (2), plus a gradient-norm pass (4): 34 B/param, in 2 + ⌈P/2·10⁷⌉ kernels."""
    params = 32 * LAYER + 2 * 262_668_288 + 4096
    wl = _wl(tp=2, dp=4, gbs=4)
    assert wl.stages[0].params == params
    ((tr, c),) = wl.step_transfers
    assert (tr.op, tr.axis, tr.message_bytes, c) == ("all_reduce", "dp", params * 4, 1.0)
    ((adam, _),) = wl.optimizer_ops
    assert adam.hbm_bytes == params * 34 and adam.kernels == 2 + math.ceil(params / 2e7)
    assert (adam.kind, adam.flop, adam.phase) == ("vector", 0.0, "optimizer")


def test_zero1_step_traffic_and_sharded_adam_by_hand():
    """ZeRO-1 (distributed optimizer) over dp 4: reduce-scatter the fp32 gradients (P·4 B), all-gather the
    updated bf16 weights (P·2 B); Adam touches P/4 parameters. fp16 runs communicate fp16 gradients and Adam moves
    2 + 12 + 12 + 2 + 2 = 30 B/param."""
    params = 32 * LAYER + 2 * 262_668_288 + 4096
    wl = _wl(tp=2, dp=4, gbs=4, zero_stage=1, precision="fp16")
    assert [(t.op, t.message_bytes, t.phase) for t, _ in wl.step_transfers] == [
        ("reduce_scatter", params * 2, "step"), ("all_gather", params * 2, "step")]
    ((adam, _),) = wl.optimizer_ops
    assert adam.hbm_bytes == pytest.approx(params / 4 * 30)


def test_low_precision_weights_are_quantized_once_per_step_unless_zero3():
    """FP8 caches the quantized weights for every micro-batch (TE is_first_microbatch): one quantize of all P
    parameters per step at 6 B each, 2 × 4 launches (the amax zeroed, the amax, the
    scale, the cast). Under ZeRO-3 the gathered weights are quantized again each
    micro-batch: per layer 109,060,096 · 6 = 654,360,576 B."""
    params = 32 * LAYER + 2 * 262_668_288 + 4096
    wl = _wl(tp=2, dp=4, gbs=4, precision="fp8")
    wq = [op for op, _ in wl.optimizer_ops if op.name == "weight_quantize"]
    assert [(op.hbm_bytes, op.kernels, op.flop, op.kind) for op in wq] == [(params * 6, 8, 0.0, "vector")]
    z3 = _wl(tp=2, dp=4, gbs=4, precision="fp8", zero_stage=3)
    per_layer = [(op.hbm_bytes, c) for op, c in z3.stages[0].ops if op.name == "weight_quantize"]
    assert per_layer == [(654_360_576, 32.0)]
    assert not any(op.name == "weight_quantize" for op, _ in z3.optimizer_ops)


def test_tied_embeddings_are_all_reduced_between_first_and_last_stage():
    """Tied input and output tables on pp 2: the two copies' fp32 gradients are all-reduced between the first and
    the last stage once per step: 128256·4096/2 · 4 = 1,050,673,152 B."""
    import dataclasses
    plan = Plan(tp=2, pp=2)
    scn = Scenario(system=system("dgx-h100"), model=dataclasses.replace(LLAMA, tied_embeddings=True), plan=plan,
                   num_gpus=4)
    tied = [(t.axis, t.message_bytes) for t, _ in build_workload(scn, "flash").step_transfers]
    assert tied == [("pp_ends", 1_050_673_152)]
