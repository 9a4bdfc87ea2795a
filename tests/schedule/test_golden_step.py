"""Golden composition rules of the closed-form step, each checked against its formula written out here with the
step's own priced parts as inputs (the parts themselves are pinned by tests/cost and tests/workload): bucketed
gradient-sync overlap (Li et al., PyTorch Distributed, VLDB 2020 §3.2.3), overlap of per-micro-batch traffic,
host-bound passes, the pipeline (Narayanan et al. SC'21 §2.2), MFU (Korthikanti et al. §6)."""
from __future__ import annotations

import dataclasses

import pytest

from narrowpath.catalog import calibration_for, model, system
from narrowpath.cost.roofline import op_time_s
from narrowpath.schedule.pipeline import pipeline_time_s
from narrowpath.schedule.step import BREAKDOWN_KEYS, exposed_after_bucketed_overlap, predict
from narrowpath.spec import Plan, Scenario

H100 = system("dgx-h100")
CAL = calibration_for(H100.device.name)


def _scn(mid="llama3-8b", sysm=H100, **kw) -> Scenario:
    plan = Plan(**kw)
    return Scenario(system=sysm, model=model(mid), plan=plan, num_gpus=plan.num_gpus)


def _slow_nic(gb_per_s: float):
    tiers = tuple(dataclasses.replace(t, bw_bytes_per_s_per_gpu=gb_per_s * 1e9) if t.name == "scale_out" else t
                  for t in H100.tiers)
    return dataclasses.replace(H100, tiers=tiers)


def test_bucketed_overlap_by_hand():
    """10 s of sync in 4 buckets (100 MB / 25 MB) behind a 5 s window, slowdown 0.1: the first bucket is ready a
    quarter into the window (1.25 s) and the stream runs on from there, 1.25 → 11.25 s: 6.25 s past the window
    (10 − 5 + 5/4), 3.75 s hidden, which slow the compute by 0.375 s: 6.625 s (fiftieth session and before: 5.5 s,
    as if the first bucket were ready when the window opened). A 100 s window hides all but the last bucket,
    7.5 s: 2.5 + 0.75 = 3.25 s. One bucket hides nothing."""
    assert exposed_after_bucketed_overlap(10.0, 100e6, 25e6, 5.0, 0.1) == pytest.approx(6.625)
    assert exposed_after_bucketed_overlap(10.0, 100e6, 25e6, 100.0, 0.1) == pytest.approx(3.25)
    assert exposed_after_bucketed_overlap(10.0, 10e6, 25e6, 100.0, 0.1) == 10.0
    assert exposed_after_bucketed_overlap(10.0, 100e6, 0.0, 100.0, 0.1) == 10.0
    assert exposed_after_bucketed_overlap(10.0, 1.0, 0.5, 100.0, 0.1) == pytest.approx(5.5)  # 2 half-byte buckets


def test_gradient_sync_hides_behind_backward_only():
    """Li et al. VLDB 2020: DDP's bucketed all-reduce starts when the first bucket's gradients are ready, so only
    the last micro-batch's backward can hide it, never the forward. Llama-3 8B on tp 8 × dp 2 over a 2 GB/s NIC,
    one micro-batch: the fp32 gradient all-reduce is longer than that backward, so the window (the backward) is
    what binds: the first of its n buckets is ready 1/n into that backward, so exposed = total − backward +
    backward/n, and what hid slows the compute by 0.1 of it."""
    pred = predict(_scn(sysm=_slow_nic(2.0), tp=8, dp=2, gbs=2, sequence_parallel=True, dp_overlap=True), CAL)
    (sync,) = [t for t in pred.transfers if t.name == "dp.grad_all_reduce"]
    bwd, fwd = pred.stages[0].bwd_compute_s, pred.stages[0].fwd_compute_s
    last_bucket = sync.total_s / (sync.message_bytes / 40e6)
    assert sync.total_s - last_bucket > bwd + fwd  # window-bound: a wider window would hide more
    expect = exposed_after_bucketed_overlap(sync.total_s, sync.message_bytes, 40e6, bwd, CAL.overlap_compute_slowdown)
    n = sync.message_bytes / 40e6
    assert expect == pytest.approx(sync.total_s - bwd + bwd / n + 0.1 * (bwd - bwd / n))
    assert pred.breakdown_s["exposed_dp_comm"] == pytest.approx(expect) == pytest.approx(sync.exposed_s)


def test_zero1_parameter_gather_hides_behind_forward():
    """The ZeRO-1 all-gather of updated weights overlaps the next step's first forward (Megatron
    --overlap-param-gather): its window is the forward compute of the critical stage."""
    pred = predict(_scn(sysm=_slow_nic(2.0), tp=8, dp=2, gbs=2, sequence_parallel=True, dp_overlap=True,
                        zero_stage=1), CAL)
    rows = {t.name: t for t in pred.transfers}
    ag, rs = rows["dp.param_all_gather"], rows["dp.grad_reduce_scatter"]
    st = pred.stages[0]
    expect = exposed_after_bucketed_overlap(ag.total_s, ag.message_bytes, 40e6, st.fwd_compute_s, 0.1) \
        + exposed_after_bucketed_overlap(rs.total_s, rs.message_bytes, 40e6, st.bwd_compute_s, 0.1)
    assert pred.breakdown_s["exposed_dp_comm"] == pytest.approx(expect)


def test_overlapped_tensor_parallel_traffic_hides_behind_gemms_and_slows_them():
    """With tp_comm_overlap each phase's layer TP traffic hides behind that phase's GEMM time and slows compute by
    0.1 of the hidden time (the weight-gradient re-gather always overlaps); the embedding's, the logits' forward
    gather and the loss's collectives stay exposed, and the output layer's backward traffic hides behind its own
    GEMMs either way (Megatron-Core's asynchronous linear backward). Llama-3 8B on tp 8 (SP), 2 micro-batches: the
    layer traffic is shorter than the
    GEMMs, so exposed TP = the non-overlappable rows only, and each pass's compute per micro-batch grows by
    0.1 × (its own phase's all-gathers and reduce-scatters that now hide) / 2: the slowdown lands in the pass the
    hidden traffic runs beside (as the event simulator prices a pass)."""
    base = dict(tp=8, gbs=2, sequence_parallel=True)
    off, on = predict(_scn(**base), CAL), predict(_scn(tp_comm_overlap=True, **base), CAL)
    layer = ("tp.all_gather", "tp.reduce_scatter")
    fixed = sum(t.total_s for t in on.transfers
                if t.axis == "tp" and t.name.startswith(("tp.embedding", "tp.logits", "tp.cross"))
                and not t.name.startswith(("tp.logits_grad", "tp.logits_input")))
    assert on.breakdown_s["exposed_tp_comm"] == pytest.approx(fixed)
    assert off.breakdown_s["exposed_tp_comm"] == pytest.approx(
        fixed + sum(t.total_s for t in off.transfers if t.name in layer))
    hidden_fwd = sum(t.total_s for t in on.transfers if t.name in layer and t.phase == "fwd") / 2
    hidden_bwd = sum(t.total_s for t in on.transfers if t.name in layer and t.phase != "fwd") / 2
    assert hidden_fwd > 0 and hidden_bwd > 0
    assert on.stages[0].bwd_compute_s - off.stages[0].bwd_compute_s == pytest.approx(0.1 * hidden_bwd, rel=1e-6)
    assert on.stages[0].fwd_compute_s - off.stages[0].fwd_compute_s == pytest.approx(0.1 * hidden_fwd, rel=1e-6)


def test_host_bound_pass_runs_at_the_host_pace_plus_its_syncs():
    """A pass takes max(GPU time, host issue time) plus host_sync_s at every host synchronisation (a dropless MoE
    layer reads its tokens-per-expert counts). With a 1 ms dispatch per kernel and 20 ms per sync, Mixtral on
    ep 8 is host-bound: forward = Σ kernels × 1 ms + Σ syncs × 20 ms."""
    cal = dataclasses.replace(CAL, host_dispatch_s=1e-3, host_sync_s=0.02)
    pred = predict(_scn("mixtral-8x7b", dp=8, ep=8, gbs=8), cal)
    st, work = pred.stages[0], pred.workload.stages[0]
    fwd = [(op, c) for op, c in work.ops if op.phase == "fwd"]
    host = sum(op.kernels * c for op, c in fwd) * 1e-3
    gpu = sum(op_time_s(op, H100.device, cal) * c for op, c in fwd)
    syncs = sum(op.host_syncs * c for op, c in fwd)
    assert syncs == 32 and host > gpu
    assert st.fwd_compute_s == pytest.approx(host + syncs * 0.02)
    assert st.host_wait_s >= host - gpu + syncs * 0.02


def test_gpu_bound_pass_is_the_sum_of_its_operator_times():
    """Without host limits a pass is the sum of its ops' roofline times (count × time each)."""
    cal = dataclasses.replace(CAL, host_dispatch_s=0.0, host_sync_s=0.0)
    pred = predict(_scn(tp=8, gbs=2, sequence_parallel=True), cal)
    ops = pred.workload.stages[0].ops
    assert pred.stages[0].fwd_compute_s == pytest.approx(
        sum(op_time_s(op, H100.device, cal) * c for op, c in ops if op.phase == "fwd"))
    assert pred.stages[0].host_wait_s == 0.0


def test_pipeline_step_and_mfu_compose_by_hand():
    """pp 4 × tp 2, 8 micro-batches: the breakdown sums to the step and the bubble is positive (its composition
    for unequal stages is held to the event simulator in tests/schedule/sim); MFU = model FLOPs / (step · GPUs ·
    dense BF16 peak 989.4 TFLOP/s); tokens/s = 8 · 8192 / step. Equal stages: (m + p − 1)·T (Narayanan et al.
    SC'21 §2.2): 8 micro-batches of 1 s on 4 stages take 11 s, interleaved with v = 2: 8 + 3/2 s."""
    pred = predict(_scn(tp=2, pp=4, gbs=8, sequence_parallel=True), CAL)
    assert pred.breakdown_s["bubble"] > 0
    assert list(pred.breakdown_s) == list(BREAKDOWN_KEYS)
    assert pred.step_time_s == pytest.approx(sum(pred.breakdown_s.values()))
    assert pred.mfu == pytest.approx(pred.model_flop_per_step / (pred.step_time_s * 8 * 989.4e12), rel=1e-3)
    assert pred.tokens_per_s == pytest.approx(8 * 8192 / pred.step_time_s)
    assert pipeline_time_s([1.0] * 4, 8) == pytest.approx(11.0)
    assert pipeline_time_s([1.0] * 4, 8, 2) == pytest.approx(9.5)


def test_power_cap_slows_arithmetic_but_mfu_stays_against_the_rated_peak():
    """Capping the H100s lowers the clock (cost.power); MFU is still model FLOPs over the rated peak."""
    capped = predict(_scn(sysm=dataclasses.replace(H100, power_limit_w=450.0), tp=8, gbs=2), CAL)
    free = predict(_scn(tp=8, gbs=2), CAL)
    assert capped.step_time_s > free.step_time_s
    assert capped.mfu == pytest.approx(capped.model_flop_per_step / (capped.step_time_s * 8 * 989.4e12), rel=1e-3)


def test_context_parallel_ring_hides_behind_all_but_one_attention_block():
    """Ring attention (Liu et al. 2023): of cp blocks the first uses local K, V, so the exchange can hide behind
    (cp − 1)/cp of the attention compute of its phase, never behind the GEMMs. Over a slow NIC (cp spans 2 nodes)
    the forward's KV exchange is exposed by its time minus (cp − 1)/cp of the forward attention."""
    pred = predict(_scn(sysm=_slow_nic(1.0), tp=8, cp=2, gbs=1, sequence_parallel=True), CAL)
    work = pred.workload.stages[0]
    cal = CAL
    attn_fwd = sum(op_time_s(op, H100.device, cal) * c for op, c in work.ops
                   if op.phase == "fwd" and op.name == "flash_attn")
    kv = [t for t in pred.transfers if t.name == "cp.kv_all_gather" and t.phase == "fwd"][0]
    assert kv.total_s > attn_fwd
    assert kv.exposed_s == pytest.approx(kv.total_s - attn_fwd / 2, rel=1e-9)
    # backward: the K, V gather uses up the attention window, so the gradients' reduce-scatter finds none left
    kv_b = [t for t in pred.transfers if t.name == "cp.kv_all_gather" and t.phase == "bwd"][0]
    rs = [t for t in pred.transfers if t.name == "cp.kv_grad_reduce_scatter"][0]
    assert kv_b.exposed_s < kv_b.total_s and rs.exposed_s == pytest.approx(rs.total_s)
