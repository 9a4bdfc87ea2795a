"""The router's launches as Megatron-Core 0.16 runs them with `moe_router_fusion` (Megatron-Bridge's MoE recipes):
forward, after the gating GEMM, the fused top-k with its score function (1) and the auxiliary load-balancing loss
(fused scores, tokens per expert, fused loss, the coefficient's division, the tracker's sum: 5), plus RandomSTE's
`clone().normal_()` of the logits (2) under forced balancing; backward, the top-k's and the loss's (1 + 5).
Counted from router.py / moe_utils.py (fifty-fourth session's source audit); each launch costs the profile's
kernel_overhead_s of GPU time and host_dispatch_s of host time."""
from __future__ import annotations

import dataclasses

import pytest

from narrowpath.catalog import model, system
from narrowpath.schedule import predict
from narrowpath.spec import Plan
from narrowpath.spec.scenario import Scenario
from narrowpath.workload.moe import moe_block_ops
from narrowpath.workload.ops import backward_ops

MIXTRAL = model("mixtral-8x7b")


def _topk(routing: str):
    plan = Plan(dp=8, ep=8, gbs=8, moe_routing=routing)
    fwd = [op for op in moe_block_ops(MIXTRAL, plan) if op.name == "router_topk"]
    bwd = [op for op in backward_ops(fwd, plan) if op.name == "router_topk"]
    return fwd[0], bwd[0]


def test_forward_and_backward_launches():
    for routing, forward in (("dropless", 6), ("token-drop", 6), ("dropless-balanced", 8)):
        f, b = _topk(routing)
        assert (f.kernels, b.kernels) == (forward, 6), routing


def test_the_launches_cost_gpu_time():
    """Two more launches under forced balancing in each MoE layer's forward, which the GPU paces here: the step
    grows by 32 layers × 8 micro-batches × 2 × kernel_overhead_s (4 us on H100: 2.048 ms)."""
    base = Scenario(name="mx", system=system("dgx-h100"), model=MIXTRAL,
                    plan=Plan(tp=1, dp=8, ep=8, mbs=1, gbs=64, zero_stage=1, recompute="selective"), num_gpus=8)
    a = predict(base)
    b = predict(dataclasses.replace(base, plan=dataclasses.replace(base.plan, moe_routing="dropless-balanced")))
    assert a.workload.num_microbatches == 8
    want = 32 * 8 * 2 * a.calibration.kernel_overhead_s
    assert b.step_time_s - a.step_time_s == pytest.approx(want, rel=0.02)
