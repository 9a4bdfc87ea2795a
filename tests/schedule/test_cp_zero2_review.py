"""Review of the context-parallel exchange types and per-micro-batch ZeRO-2: traffic each one really moves, and
the orderings a user relies on (an exposed exchange never beats the same traffic overlapped; ZeRO-2 never beats
ZeRO-1, whose traffic it includes)."""
from __future__ import annotations

import dataclasses

import pytest

from narrowpath.catalog import load_scenario, model
from narrowpath.errors import SpecError
from narrowpath.schedule import step as step_mod
from narrowpath.schedule.step import predict


def _scn(model_id: str | None = None, **plan):
    s = load_scenario(None)  # llama3-70b on 256 H100 (8 kv heads), gbs 512
    if model_id:
        s = dataclasses.replace(s, model=model(model_id))
    p = dataclasses.replace(s.plan, **plan)
    return dataclasses.replace(s, plan=p, num_gpus=p.num_gpus)


def _cp(pred):
    return {(t.name, t.phase): t for t in pred.transfers if t.axis == "cp"}


def test_all_gather_cp_regathers_k_v_in_backward():
    # Transformer Engine's KV all-gather attention saves only the local K, V and all-gathers them again in backward
    pred = predict(_scn(tp=4, pp=4, vpp=1, cp=2, dp=8, recompute="none", cp_comm="all_gather"))
    assert set(_cp(pred)) == {("cp.kv_all_gather", "fwd"), ("cp.kv_all_gather", "bwd"),
                              ("cp.kv_grad_reduce_scatter", "bwd")}
    # the same traffic as the ring, only exposed
    ring = predict(_scn(tp=4, pp=4, vpp=1, cp=2, dp=8, recompute="none", cp_comm="p2p"))
    assert {k: t.total_s for k, t in _cp(pred).items()} == pytest.approx({k: t.total_s for k, t in _cp(ring).items()})


GRID = [dict(tp=2, cp=4, pp=4, dp=8, sequence_parallel=True, zero_stage=2, recompute="none"),
        dict(tp=8, cp=4, pp=1, dp=8, sequence_parallel=True, zero_stage=3, recompute="selective"),
        dict(tp=8, cp=2, pp=1, dp=16, sequence_parallel=False, zero_stage=3, recompute="full"),
        dict(tp=2, cp=4, pp=1, dp=32, sequence_parallel=False, zero_stage=2, recompute="selective")]


@pytest.mark.parametrize("plan", GRID)
@pytest.mark.parametrize("kernel", ["flash", "unfused"])
def test_exposed_all_gather_never_beats_the_overlapped_ring(plan, kernel):
    # was: the all-gather type skipped the backward re-gather, so with ZeRO-2/3 sharing the backward's overlap
    # window it came out faster than the ring that moves the same K, V
    ring = predict(_scn(vpp=1, attention=kernel, cp_comm="p2p", **plan)).step_time_s
    gather = predict(_scn(vpp=1, attention=kernel, cp_comm="all_gather", **plan)).step_time_s
    assert gather >= ring * (1 - 1e-12)


@pytest.mark.parametrize("overlap", [True, False])
@pytest.mark.parametrize("plan", [dict(tp=2, cp=2, pp=1, dp=64, recompute="full", attention="unfused"),
                                  dict(tp=2, cp=2, pp=1, dp=64, recompute="selective", attention="flash"),
                                  dict(tp=8, cp=1, pp=4, dp=8, recompute="selective", attention="flash"),
                                  dict(tp=8, cp=1, pp=1, dp=32, recompute="none", attention="flash", gbs=64)])
def test_zero2_never_faster_than_zero1(plan, overlap):
    # was: without dp_overlap ZeRO-1's step reduce-scatter was exposed while ZeRO-2's per-micro-batch ones still hid
    # behind the backward, so ZeRO-2 came out faster than ZeRO-1 with strictly more traffic
    z1 = predict(_scn(vpp=1, sequence_parallel=True, zero_stage=1, dp_overlap=overlap, **plan))
    z2 = predict(_scn(vpp=1, sequence_parallel=True, zero_stage=2, dp_overlap=overlap, **plan))
    assert z1.workload.num_microbatches > 1
    assert z2.step_time_s >= z1.step_time_s * (1 - 1e-12)


def test_zero2_per_microbatch_reduce_scatter_follows_dp_overlap():
    m = None
    for overlap in (True, False):
        pred = predict(_scn(tp=8, pp=4, vpp=1, cp=1, dp=8, zero_stage=2, dp_overlap=overlap))
        m = pred.workload.num_microbatches
        rows = [t for t in pred.transfers if t.name == "dp.zero2_grad_reduce_scatter"]
        assert rows and all(t.count % (m - 1) == 0 for t in rows)  # the first m − 1 micro-batches
        if not overlap:  # DeepSpeed overlap_comm off: the reduction sits in the backward's stream
            assert all(t.exposed_s == pytest.approx(t.total_s) for t in rows)
        step_rs = [t for t in pred.transfers if t.name == "dp.grad_reduce_scatter"]
        assert len(step_rs) == 1 and step_rs[0].phase == "step" and step_rs[0].count == 1  # the last micro-batch's


def test_a2a_needs_kv_heads_divisible_by_tp_cp():
    # Transformer Engine's a2a path asserts q and k heads per rank split over cp (no K, V head replication)
    with pytest.raises(SpecError, match="kv_heads"):
        _scn(tp=8, pp=4, vpp=5, cp=2, dp=4, cp_comm="a2a")  # 64 heads over 16 fine, 8 kv heads not
    _scn(tp=4, pp=4, vpp=5, cp=2, dp=8, cp_comm="a2a")  # 8 kv heads over tp·cp = 8
    _scn(tp=8, pp=4, vpp=5, cp=2, dp=4, cp_comm="p2p")  # the ring has no such constraint


@pytest.mark.parametrize("comm", ["p2p", "all_gather", "a2a"])
def test_selective_recompute_of_the_core_fetches_remote_k_v_again(comm):
    """A selectively recomputed attention core (`core_attn`) runs again before its backward with either kernel
    (Megatron-Core checkpoints the core whatever it is), so its remote keys and values are fetched again: the ring's
    or the all-gather's K, V, and under the all-to-all exchange the whole checkpointed function again: Q, K, V in and
    the output back (Transformer Engine's AttnFuncWithCPAndQKVOA2A)."""
    base = dict(tp=4, pp=4, vpp=1, cp=2, dp=8, recompute="selective", cp_comm=comm)
    for attention in ("unfused", "flash"):
        got = set(_cp(predict(_scn(attention=attention, **base))))
        again = {name for name, ph in got if ph == "recompute"}
        assert again == ({"cp.qkv_all_to_all", "cp.attn_out_all_to_all"} if comm == "a2a" else
                         {"cp.kv_all_gather"}), attention


def test_dp_contention_over_dp_cp_groups(monkeypatch):
    s = _scn(tp=8, pp=1, vpp=1, cp=2, dp=16)
    tiers = tuple(dataclasses.replace(t, oversubscription=4.0) if t.name == "scale_out" else t for t in s.system.tiers)
    s = dataclasses.replace(s, system=dataclasses.replace(s.system, tiers=tiers))
    seen = []
    real = step_mod.concurrent_slowdown

    def spy(plan, system, axis, **kw):
        seen.append(axis)
        return real(plan, system, axis, **kw)

    monkeypatch.setattr(step_mod, "concurrent_slowdown", spy)
    predict(s)
    assert "dpcp" in seen and "dp" not in seen  # the gradient sync runs on the dp × cp groups it is priced on


def test_ring_moves_one_kv_head_per_rank_when_tp_equals_the_kv_heads():
    # tp 8 over 8 kv heads: every tp rank holds one whole K and V head, as attention_ops counts; tp 8 over 4 kv heads
    # is refused in training (Megatron-Core divides the query groups over tp; serving replicates them)
    s = _scn(tp=8, pp=4, vpp=1, cp=2, dp=4, recompute="none")
    with pytest.raises(SpecError, match="does not divide model.kv_heads 4"):
        dataclasses.replace(s, model=dataclasses.replace(s.model, kv_heads=4))
    s = dataclasses.replace(s, model=dataclasses.replace(s.model, kv_heads=8))
    m, p = s.model, s.plan
    kv = next(t for t in predict(s).transfers if t.name == "cp.kv_all_gather")
    assert kv.message_bytes == pytest.approx(p.mbs * m.seq_len // p.cp * 2 * m.head_dim * 2 * p.cp)
