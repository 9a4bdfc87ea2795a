"""Workload values checked where mutation testing (benchmarks/mutation.py, seed 18) found them loose: the phase of an
LSTM's optimizer update."""
from __future__ import annotations

from narrowpath.catalog import model, system
from narrowpath.spec import Plan, Scenario
from narrowpath.workload.build import build_workload


def test_the_lstm_optimizer_update_is_in_the_optimizer_phase():
    """GNMT-style LSTM (8 layers of 1024, vocab 32,000), fp16, tp 2, dp 4: the step's one optimizer op is Adam,
    phase `optimizer` (Op.phase), like a transformer's update — analysis.verdict leaves ops of that phase out of the
    compute split, since the update is its own component. Its bytes by hand: params = 8·(8·1024² + 8·1024)/2 +
    2·32,000·1024/2 = 33,587,200 + 32,768,000 = 66,355,200 per rank; fp16 gradients (G = 2): 66,355,200 ·
    (2 + 12 + 12 + 2 + 2) = 1,990,656,000 B, 3 kernels, no FLOPs."""
    plan = Plan(tp=2, dp=4, mbs=64, gbs=256, precision="fp16")
    wl = build_workload(Scenario(system=system("dgx-a100"), model=model("gnmt-lstm"), plan=plan, num_gpus=8),
                        "flash")
    [(adam, count)] = wl.optimizer_ops
    assert (adam.name, adam.kind, adam.phase, count) == ("adam", "vector", "optimizer", 1.0)
    assert (adam.flop, adam.hbm_bytes, adam.kernels) == (0.0, 1_990_656_000, 3)
    # the transformer builder puts its update in the same phase
    dense = Plan(tp=2, dp=4, gbs=8)
    twl = build_workload(Scenario(system=system("dgx-h100"), model=model("llama3-8b"), plan=dense, num_gpus=8),
                         "flash")
    assert {op.phase for op, _ in twl.optimizer_ops} == {"optimizer"}
