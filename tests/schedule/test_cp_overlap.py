"""A context-parallel KV exchange hides only behind the attention core of its phase, not behind every GEMM."""
from __future__ import annotations

import dataclasses

from narrowpath.catalog.resolve import load_scenario
from narrowpath.schedule.step import predict
from narrowpath.workload.transformer import is_attention_core


def _scn(**plan):
    s = load_scenario(None)  # llama3-70b, 256 H100, seq 8192
    return dataclasses.replace(s, plan=dataclasses.replace(s.plan, **plan))


def _attention_time_s(pred, phase: str) -> float:
    from narrowpath.cost.roofline import op_time_s
    st = pred.workload.stages[0]
    return sum(op_time_s(op, pred.scenario.system.device, pred.calibration) * c for op, c in st.ops
               if op.phase == phase and is_attention_core(op))


def test_kv_exchange_hidden_at_most_by_attention():
    # cp=32 over the scale-out fabric: 256 tokens per rank, the KV gather outlasts the attention that could hide it
    pred = predict(_scn(tp=2, pp=4, vpp=5, cp=32, dp=1, mbs=16, zero_stage=3, recompute="none"))
    kv = next(t for t in pred.transfers if t.name == "cp.kv_all_gather" and t.phase == "fwd")
    assert kv.tier == "scale_out"
    micro = pred.workload.num_microbatches
    hidden_per_microbatch = (kv.total_s - kv.exposed_s) / micro
    cp = pred.scenario.plan.cp  # the first of cp ring blocks runs on local K, V: only cp - 1 can hide a transfer
    assert hidden_per_microbatch <= _attention_time_s(pred, "fwd") * (cp - 1) / cp * (1 + 1e-9)
    assert kv.exposed_s > 0 and pred.breakdown_s["exposed_cp_comm"] > 0


def test_small_kv_exchange_inside_nvlink_stays_hidden():
    pred = predict(_scn(tp=2, pp=4, vpp=5, cp=4, dp=8, mbs=1, zero_stage=1, recompute="none"))
    kv = [t for t in pred.transfers if t.axis == "cp"]
    assert kv and all(t.tier == "scale_up" and t.exposed_s == 0 for t in kv)


def test_full_recompute_regathers_kv():
    pred = predict(_scn(tp=8, pp=1, vpp=1, cp=2, dp=16, mbs=1, zero_stage=1, recompute="full"))
    phases = {t.phase for t in pred.transfers if t.name == "cp.kv_all_gather"}
    assert phases == {"fwd", "bwd", "recompute"}  # ring CP re-circulates K, V in backward beside dK, dV
    none = predict(_scn(tp=8, pp=1, vpp=1, cp=2, dp=16, mbs=1, zero_stage=1, recompute="none"))
    assert {t.phase for t in none.transfers if t.name == "cp.kv_all_gather"} == {"fwd", "bwd"}
