"""Regression checks from review: ZeRO sharding groups, interleaved in-flight depth, ZeRO-3 and SP edge traffic."""
from __future__ import annotations

import pytest

from narrowpath.catalog import model, system
from narrowpath.cost.memory import in_flight_microbatches, stage_memory
from narrowpath.schedule import predict
from narrowpath.spec import Plan, Scenario
from narrowpath.workload.build import build_workload


def _scn(mid, sid="dgx-h100", **kw) -> Scenario:
    plan = Plan(**kw)
    return Scenario(system=system(sid), model=model(mid), plan=plan, num_gpus=plan.num_gpus)


def test_interleaved_last_stage_holds_megatron_warmup_depth():
    """Megatron interleaved warm-up: 2(p−r−1) + (v−1)p chunk passes + 1, in stage-micro-batches (÷v)."""
    s = _scn("gpt-145.6b", "dgx-a100", tp=8, pp=8, vpp=2, mbs=1, gbs=64)
    assert in_flight_microbatches(7, s) == pytest.approx(8 - 7 / 2)
    assert in_flight_microbatches(0, s) == pytest.approx(8 + 7 / 2)


def test_zero_shards_dense_over_dp_cp_and_experts_over_expert_dp():
    dense = _scn("llama3-8b", tp=4, cp=4, dp=4, gbs=4, zero_stage=1, sequence_parallel=True)
    wl = build_workload(dense, "flash")
    st = wl.stages[0]
    mem = stage_memory(dense, wl, "flash")[0]
    assert mem.items["optimizer_state"] == pytest.approx(st.params * 12 / 16)
    moe = _scn("mixtral-8x7b", tp=2, pp=4, dp=8, ep=8, gbs=64, zero_stage=1)
    wl = build_workload(moe, "flash")
    st = wl.stages[0]
    assert st.expert_params > 0.5 * st.params
    mem = stage_memory(moe, wl, "flash")[0]
    # ep = dp: every rank holds its own experts, so ZeRO cannot shard them, and they need no gradient sync
    assert mem.items["optimizer_state"] == pytest.approx(((st.params - st.expert_params) / 8 + st.expert_params) * 12)
    assert not any(tr.axis == "edp" for tr, _ in wl.step_transfers)


def test_zero3_gathers_embedding_and_output_layer():
    s = _scn("llama3-8b", dp=8, gbs=8, zero_stage=3)
    wl = build_workload(s, "flash")
    per_layer = sum(tr.message_bytes * c for tr, c in wl.stages[0].transfers
                    if tr.name == "dp.zero3_param_all_gather" and tr.phase == "fwd")
    assert per_layer == pytest.approx(wl.stages[0].params * 2)


def test_sequence_parallel_embedding_has_backward_all_gather():
    s = _scn("llama3-8b", tp=8, gbs=1, sequence_parallel=True)
    names = {tr.name for tr, _ in build_workload(s, "flash").stages[0].transfers}
    assert "tp.embedding_grad_all_gather" in names


def test_no_zero_count_rows_for_layer_kinds_a_stage_lacks():
    s = _scn("mixtral-8x7b", tp=2, dp=4, ep=4, gbs=16, zero_stage=3)
    assert all(t.count > 0 for t in predict(s).transfers)
