"""Gradient sync and ZeRO sharding run over dp × cp (cp ranks hold the same weights), and ZeRO-2 with gradient
accumulation reduce-scatters after every backward."""
from __future__ import annotations

import dataclasses

import pytest

from narrowpath.catalog import load_scenario, model, system
from narrowpath.schedule.step import predict
from narrowpath.spec import Plan, Scenario


def _scn(**plan):
    s = load_scenario(None)  # llama3-70b, 256 H100, gbs 512
    p = dataclasses.replace(s.plan, **plan)
    return dataclasses.replace(s, plan=p, num_gpus=p.num_gpus)


def _names(pred):
    return {t.name: t for t in pred.transfers}


def test_context_parallel_job_without_dp_still_syncs_gradients():
    pred = predict(_scn(tp=8, pp=4, vpp=5, cp=8, dp=1, zero_stage=1))
    xf = _names(pred)
    assert "dp.grad_reduce_scatter" in xf and xf["dp.grad_reduce_scatter"].group_size == 8
    assert "dp.param_all_gather" in xf


def test_zero3_over_cp_only_gathers_weights():
    pred = predict(_scn(tp=2, pp=4, vpp=5, cp=32, dp=1, mbs=16, zero_stage=3, recompute="none"))
    gathers = [t for t in pred.transfers if t.name == "dp.zero3_param_all_gather"]
    assert gathers and all(t.group_size == 32 for t in gathers)


def test_zero2_with_accumulation_reduces_every_microbatch():
    acc = predict(_scn(zero_stage=2))  # 64 micro-batches
    names = _names(acc)
    # the first m − 1 backwards reduce-scatter in their backward; the last one's is the step's reduce-scatter
    assert "dp.zero2_grad_reduce_scatter" in names and "dp.grad_reduce_scatter" in names
    m = acc.workload.num_microbatches
    per_mb = [t for t in acc.transfers if t.name == "dp.zero2_grad_reduce_scatter"]
    assert all(t.phase == "bwd" for t in per_mb)
    # once per layer (or per embedding table) in each of the first m − 1 micro-batches
    assert {t.count / (m - 1) for t in per_mb} == {20.0, 1.0}  # 80 layers / pp 4 per stage; one embedding table
    rs = max(per_mb, key=lambda t: t.count)
    one = _names(predict(_scn(zero_stage=1)))
    assert "dp.grad_reduce_scatter" in one and "dp.zero2_grad_reduce_scatter" not in one
    # more traffic can only cost time: never faster than ZeRO-1, and it does move more bytes per step
    assert acc.step_time_s >= predict(_scn(zero_stage=1)).step_time_s * (1 - 1e-12)
    assert rs.message_bytes * rs.count > one["dp.grad_reduce_scatter"].message_bytes


def test_zero2_without_accumulation_is_zero1_traffic():
    s = _scn(zero_stage=2, gbs=8, vpp=1)  # dp 8 × mbs 1: one micro-batch per step
    assert s.plan.num_microbatches == 1
    names = _names(predict(s))
    assert "dp.grad_reduce_scatter" in names and "dp.zero2_grad_reduce_scatter" not in names


def test_moe_expert_gradients_sync_over_cp_too():
    m = model("mixtral-8x7b")
    plan = Plan(tp=1, pp=1, cp=2, dp=4, ep=2, mbs=1, gbs=16, zero_stage=1)
    pred = predict(Scenario(name="t", system=system("dgx-h100"), model=m, plan=plan, num_gpus=plan.num_gpus))
    exp = [t for t in pred.transfers if t.name == "dp.expert_grad_reduce_scatter"]
    assert exp and exp[0].group_size == 4  # cp 2 × dp/ep 2
