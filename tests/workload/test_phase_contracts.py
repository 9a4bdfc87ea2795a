"""Contracts the stages rely on, checked where the mutation sample found them unguarded: every op and transfer a
training workload holds has one of the documented phases; serving (inference) runs forward ops only; the recompute
modules a plan implies; a flash-kernel MTP block recomputes no attention core; a lone MoE token still runs its
expert."""
from __future__ import annotations

import dataclasses

import pytest

from narrowpath.catalog import load_scenario, model, system
from narrowpath.spec import Plan, Scenario
from narrowpath.spec.serving import ServingPlan
from narrowpath.workload.build import _mtp_ops, build_workload
from narrowpath.workload.items import PHASES
from narrowpath.workload.recompute import modules_of
from narrowpath.workload.serving import Formats, embedding_op, head_ops, layer_token_ops, moe_token_ops


def _ds(cache: str = "default", rc: str = "none", **kw):
    s = load_scenario("deepseek-v3-h800-2048")
    plan = dataclasses.replace(s.plan, recompute=rc, recompute_modules=(), activation_cache=cache, **kw)
    return dataclasses.replace(s, plan=plan)


@pytest.mark.parametrize("name", ["llama3-8b-h100-8", "deepseek-v3-h800-2048"])
def test_every_op_and_transfer_has_a_documented_phase(name):
    """items.Op.phase is one of fwd/bwd/recompute/optimizer (items.PHASES); a transfer's one of those or `step`.
    Both the per-micro-batch stage work and the step's optimizer ops are checked; the optimizer ops must say so."""
    wl = build_workload(load_scenario(name), "flash")
    phases = {op.phase for st in wl.stages for op, _ in st.ops} | {op.phase for op, _ in wl.optimizer_ops}
    assert phases <= set(PHASES)
    assert {op.phase for op, _ in wl.optimizer_ops} == {"optimizer"}
    xf = {tr.phase for st in wl.stages for tr, _ in st.transfers} | {tr.phase for tr, _ in wl.step_transfers}
    assert xf <= set(PHASES) | {"step"}


def test_lstm_has_a_gradient_all_reduce_only_with_data_parallelism():
    """GNMT-style LSTM, fp16, tp 2: one replica (dp 1) has nobody to exchange gradients with, so no dp transfer;
    dp 4 all-reduces the gradients once per step, 2 bytes per local parameter (fp16 gradients)."""
    def lstm(dp: int):
        plan = Plan(tp=2, dp=dp, mbs=64, gbs=64 * dp, precision="fp16")
        return build_workload(Scenario(system=system("dgx-a100"), model=model("gnmt-lstm"), plan=plan,
                                       num_gpus=2 * dp), "flash")
    assert lstm(1).step_transfers == ()
    wl = lstm(4)
    (tr, c), = wl.step_transfers
    assert tr.axis == "dp" and c == 1.0
    assert tr.message_bytes == pytest.approx(wl.stages[0].params * 2)


def test_recompute_modules_follow_the_plan():
    """Selective recompute defaults to `core_attn`; DeepSeek-V3's FP8 cache adds the experts' SwiGLU (`moe_act`)
    unless the whole layer runs again anyway (full recompute); no recompute and no cache: nothing."""
    assert modules_of(_ds().plan) == frozenset()
    assert modules_of(_ds(rc="selective").plan) == {"core_attn"}
    assert modules_of(_ds("fp8").plan) == {"moe_act"}
    assert modules_of(_ds("fp8", rc="selective").plan) == {"core_attn", "moe_act"}
    assert modules_of(_ds("fp8", rc="full").plan) == frozenset()
    assert modules_of(_ds(rc="full").plan) == frozenset()


def test_flash_mtp_block_recomputes_its_attention_core():
    """`core_attn` recompute re-runs the attention core whatever the kernel (Megatron-Core checkpoints it); the MTP
    block runs flash attention, so under selective `core_attn` the module runs its one flash kernel again and
    nothing else; under the FP8 cache also the experts' SwiGLU (and the down-projection's input quantization)."""
    ops = _mtp_ops(_ds(rc="selective"))
    assert ops and [op.name for op, _ in ops if op.phase == "recompute"] == ["flash_attn"]
    again = {op.name for op, _ in _mtp_ops(_ds("fp8", rc="selective")) if op.phase == "recompute"}
    assert again == {"expert_act", "expert_down.quantize", "flash_attn"}


def test_serving_runs_forward_ops_only():
    """Inference has no backward: every serving op (embedding, layer, MoE, output head) is in phase `fwd`."""
    plan = ServingPlan(tp=2, ep=2)
    for name in ("llama3-8b", "mixtral-8x7b"):
        m = model(name)
        f = Formats.of(plan, True, m)
        ops = layer_token_ops(m, plan, f, 64.0, m.moe is not None) + head_ops(m, plan, 8.0) + [embedding_op(m, 64.0)]
        assert ops and {op.phase for op in ops} == {"fwd"}


def test_a_lone_token_routed_top1_runs_its_expert():
    """Mixtral 8x7B made top-1 (Switch-style), one GPU (ep 1), one decode token: the token's copy goes to one
    expert, rows = 1. Up projection (SwiGLU, 2·14336 wide): 2·1·4096·28672 = 234,881,024 FLOPs and that expert's
    4096·28672·2 B = 234,881,024 B of bf16 weights; down: 2·14336·4096 = 117,440,512 FLOPs."""
    m = model("mixtral-8x7b")
    m = dataclasses.replace(m, moe=dataclasses.replace(m.moe, top_k=1))
    plan = ServingPlan(ep=1, tp=1)
    ops = {op.name: op for op in moe_token_ops(m, plan, Formats.of(plan, True, m), 1.0)}
    assert ops["expert_up"].flop == pytest.approx(234_881_024)
    assert ops["expert_up"].weight_bytes == pytest.approx(234_881_024)
    assert ops["expert_down"].flop == pytest.approx(117_440_512)
