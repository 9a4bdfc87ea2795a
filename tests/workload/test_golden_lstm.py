"""Golden LSTM work by hand (GNMT-style: 8 layers of 1024, vocab 32000, 256 steps; Appleyard et al. 2016's fused
gate GEMM [b × 2h]·[2h × 4h]), batch 64, fp16 (A = 2), tp 2, dp 4, one micro-batch."""
from __future__ import annotations

import pytest

from narrowpath.catalog import model, system
from narrowpath.spec import Plan, Scenario
from narrowpath.workload.build import build_workload
from narrowpath.workload.counts import parameter_count


@pytest.fixture(scope="module")
def wl():
    plan = Plan(tp=2, dp=4, mbs=64, gbs=256, precision="fp16")
    return build_workload(Scenario(system=system("dgx-a100"), model=model("gnmt-lstm"), plan=plan, num_gpus=8),
                          "flash")


def test_per_step_gate_gemm_and_cell_by_hand(wl):
    """Per layer and time step (256 · 8 = 2,048 executions): gates GEMM 2·64·2048·(4·1024/2) = 536,870,912 FLOPs,
    moving 64·2048·2 + 2048·2048·2 + 64·2048·2 = 8,912,896 B (the weights re-read every step); the cell kernel
    reads 4 gates and the cell state and writes 2 states: 7·64·1024/2·2 = 458,752 B. cuDNN issues the loop inside
    one call: no host launches of its own. Backward: dgrad + wgrad of the GEMM, 2× the cell's bytes."""
    ops = {(op.name, op.phase): (op, c) for op, c in wl.stages[0].ops}
    gates, n = ops[("lstm_gates", "fwd")]
    assert (gates.flop, gates.hbm_bytes, n, gates.host_kernels) == (536_870_912, 8_912_896, 2048, 0)
    cell, _ = ops[("lstm_cell", "fwd")]
    assert cell.hbm_bytes == 458_752 and ops[("lstm_cell", "bwd")][0].hbm_bytes == 2 * 458_752
    assert ops[("lstm_gates.dgrad", "bwd")][0].flop == ops[("lstm_gates.wgrad", "bwd")][0].flop == 536_870_912


def test_output_layer_and_loss_by_hand(wl):
    """Once per micro-batch: logits 2·64·256·1024·32000/2 = 536,870,912,000 FLOPs; fp32 cross entropy
    16 B/logit forward (64·256·32000/2 = 262,144,000 logits × 16 B = 4,194,304,000 B, 4 kernels) and 12 B/logit
    backward (3,145,728,000 B, 2 kernels)."""
    ops = {(op.name, op.phase): (op, c) for op, c in wl.stages[0].ops}
    assert ops[("logits", "fwd")][0].flop == 536_870_912_000
    ce_f, ce_b = ops[("cross_entropy", "fwd")][0], ops[("cross_entropy", "bwd")][0]
    assert (ce_f.hbm_bytes, ce_f.kernels, ce_b.hbm_bytes, ce_b.kernels) == (4_194_304_000, 4, 3_145_728_000, 2)


def test_parameters_traffic_and_optimizer_by_hand(wl):
    """Parameters: per layer 4 gates × (h + h) × h weights + 2 × 4h biases = 8h² + 8h; 8 layers + embedding and
    softmax 2·V·h: 132,710,400 in all, 66,355,200 per tp rank. Each step's gate activations are all-gathered over
    tp (64·4096·2 = 524,288 B) in forward and backward; fp16 gradients all-reduced over dp (132,710,400 B); Adam
    moves 2 + 12 + 12 + 2 + 2 = 30 B/param: 1,990,656,000 B. Model FLOPs 3 × forward matrix FLOPs × 8 ranks:
    3·(536,870,912·2048 + 536,870,912,000)·8 = 39,273,180,954,624; tokens 256·256."""
    assert parameter_count(model("gnmt-lstm")) == 132_710_400
    st = wl.stages[0]
    assert st.params == 66_355_200
    assert [(t.op, t.axis, t.phase, t.message_bytes, c) for t, c in st.transfers] == [
        ("all_gather", "tp", "fwd", 524_288, 2048.0), ("all_gather", "tp", "bwd", 524_288, 2048.0)]
    ((sync, _),) = wl.step_transfers
    assert (sync.op, sync.message_bytes) == ("all_reduce", 132_710_400)
    ((adam, _),) = wl.optimizer_ops
    assert adam.hbm_bytes == 1_990_656_000 and adam.kernels == 3
    assert wl.model_flop_per_step == 39_273_180_954_624 and wl.tokens_per_step == 65_536
    assert wl.params_total == 132_710_400


def test_two_replicas_already_sync_their_gradients():
    plan = Plan(dp=2, mbs=64, gbs=128, precision="fp16")
    wl = build_workload(Scenario(system=system("dgx-a100"), model=model("gnmt-lstm"), plan=plan, num_gpus=2), "flash")
    assert [(t.name, t.axis, t.message_bytes) for t, _ in wl.step_transfers] == [
        ("dp.grad_all_reduce", "dp", 2 * 132_710_400)]
