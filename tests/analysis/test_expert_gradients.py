"""Expert gradients sync over the expert-data-parallel group (`edp`); the communication budget must see them."""
from __future__ import annotations

import dataclasses

from narrowpath.analysis.communication import compression_saving_s
from narrowpath.analysis.context import build_context
from narrowpath.catalog import model, system
from narrowpath.schedule import predict
from narrowpath.spec import Plan, Scenario


def _mixtral(ep: int) -> Scenario:
    plan = Plan(tp=2, pp=4, dp=8, ep=ep, mbs=1, gbs=256, zero_stage=1, precision="bf16")
    return Scenario(system=system("dgx-h100"), model=model("mixtral-8x7b"), plan=plan, num_gpus=64)


def test_compression_saving_includes_expert_gradient_sync():
    pred = predict(_mixtral(2))
    edp = [t for t in pred.transfers if t.axis == "edp" and "grad" in t.name]
    assert edp and all(t.exposed_s > 0 for t in edp)
    with_edp = compression_saving_s(build_context(pred), 4.0)
    # the same prediction with the expert rows removed saves strictly less
    only_dp = dataclasses.replace(pred, transfers=tuple(t for t in pred.transfers if t.axis != "edp"))
    assert with_edp > compression_saving_s(build_context(only_dp), 4.0) > 0
