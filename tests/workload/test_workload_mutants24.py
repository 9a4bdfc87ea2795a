"""Workload values the seed-24 mutation sample (benchmarks/mutation.py) found unguarded: which stage the step's
gradient sync is sized for when two stages hold as many parameters, the one-layer first stage the end split
proposes on two stages, and a grouped GEMM over fewer than two active experts in expectation — each pinned by a
hand calculation."""
from __future__ import annotations

import pytest

from narrowpath.catalog import model, system
from narrowpath.spec import Plan, Scenario
from narrowpath.spec.model import Model, MoE
from narrowpath.spec.serving import ServingPlan
from narrowpath.workload.build import build_workload
from narrowpath.workload.serving import Formats, _linear, expected_active_experts
from narrowpath.workload.split import balanced_end_layers


def test_a_tie_between_stages_sizes_the_gradient_sync_for_the_first_one():
    """Two stages holding exactly as many parameters: a 2-layer model (hidden 64, 4 heads of 16, GeLU, no biases,
    vocabulary 128, untied) whose layer 0 is dense (ffn 14) and layer 1 an MoE layer of 3 experts of ffn 4, on
    pp 2 × dp 2. Stage 0: attention 4·64² = 16,384 + norms 2·64 = 128 + MLP 2·64·14 = 1,792 + embedding
    128·64 = 8,192 = 26,496. Stage 1: 16,384 + 128 + router 64·3 = 192 + experts 3·2·64·4 = 1,536 + output
    layer 8,192 + final norm 64 = 26,496. The once-per-step work is sized for the first stage with the most
    parameters (max keeps the first maximum), stage 0, all of them dense: one all-reduce of 26,496 fp32
    gradients (4 B each) over dp, and no expert-gradient all-reduce (which stage 1's 1,536 expert parameters
    would add over the expert-dp group)."""
    m = Model(name="tie", layers=2, hidden=64, heads=4, ffn=14, vocab=128, seq_len=128,
              moe=MoE(num_experts=3, top_k=1, expert_ffn=4, first_dense_layers=1))
    scn = Scenario(system=system("dgx-h100"), model=m, plan=Plan(pp=2, dp=2, mbs=1, gbs=4), num_gpus=4)
    wl = build_workload(scn, "flash")
    assert [(s.params, s.expert_params) for s in wl.stages] == [(26_496.0, 0.0), (26_496.0, 1_536.0)]
    assert [(t.name, t.axis, t.message_bytes) for t, _ in wl.step_transfers] == \
        [("dp.grad_all_reduce", "dp", 26_496 * 4.0)]


def test_the_end_split_names_a_one_layer_first_stage_as_the_last_stages_count():
    """4 layers on pp 2, stage 0 taking 6 s for its 2 layers and stage 1 2 s for its 2 (so 3 s a layer, and the
    output end 2 − 6 = −4 s beside its layers): a 1/3 split gives 3 s and 3·3 − 4 = 5 s, the best (2/2: 6 s,
    3/1: 9 s). The search tries the first stage's count 0 (automatic) before any other, so it reaches that split
    first as last_stage_layers 3 — layers − 1, the largest count one end can take on two stages — and keeps it
    against the equal (1, 0) found later."""
    assert balanced_end_layers(4, 2, 1, [6.0, 2.0], [2, 2]) == (0, 3)


def test_a_grouped_gemm_over_fewer_than_two_experts_splits_its_rows_over_them():
    """The routed experts' grouped GEMM runs `groups` experts in expectation, possibly fractional: 8 token copies
    over 8 experts, 2 of them on this GPU, leave 2·(1 − (7/8)^8) = 1.3128 of them active. Its rows per expert are
    m / groups: 8 rows over 1.5 experts are 5.333 a group (not 8 / 2 = 4), which decides the weight-stream ramp
    (cost.roofline)."""
    assert expected_active_experts(2, 8, 8) == pytest.approx(2 * (1 - (7 / 8) ** 8), rel=1e-12)
    assert 1.0 < expected_active_experts(2, 8, 8) < 2.0
    f = Formats.of(ServingPlan(), True, model("mixtral-8x7b"))
    op = _linear("expert_up", f, 8.0, 4096, 2 * 14336, groups=1.5)
    assert op.rows == pytest.approx(8 / 1.5, rel=1e-12)
