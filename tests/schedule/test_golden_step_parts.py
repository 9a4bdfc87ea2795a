"""Golden parts of the step model: which link a pipeline send uses, which bucket expert gradients land in, how
oversubscription stretches an all-to-all, how rows of several layer kinds merge, and the provenance text a
prediction carries (STYLE.md #12)."""
from __future__ import annotations

import dataclasses

import pytest

from narrowpath.catalog import calibration_for, model, system
from narrowpath.cost.collectives import collective_time
from narrowpath.network.contention import concurrent_slowdown
from narrowpath.schedule.step import predict, profile_usage, transfer_span
from narrowpath.spec import Plan, Scenario
from narrowpath.spec.calibration import TierCalibration

H100 = system("dgx-h100")
CAL = calibration_for(H100.device.name)


def _scn(mid="llama3-8b", sysm=H100, **kw) -> Scenario:
    plan = Plan(**kw)
    return Scenario(system=sysm, model=model(mid), plan=plan, num_gpus=plan.num_gpus)


def test_pipeline_neighbours_and_ends_by_stride():
    """Placement tp, cp, dp, pp: with tp 2 and dp 2 the pipeline stride is 4 ranks and a pipeline group spans
    4·4 = 16 ranks, two 8-GPU nodes: stage 1 (ranks 4–7) sends to stage 2 (ranks 8–11) across them, and a synchronous
    pipeline runs at its slowest boundary, so the pipeline traffic is priced over the NICs; so are the first and last
    stages, 12 ranks apart. With tp 8 neighbours are 8 apart: different nodes. tp 4 × pp 3 (stride 4, 12 ranks):
    stage 1 → 2 crosses (ranks 4–7 → 8–11). Placed tp, pp, dp instead, a pipeline group of tp 2 × pp 4 is 8
    consecutive ranks, one node: every boundary and the end pair stay on NVLink."""
    s = _scn(tp=2, dp=2, pp=4, gbs=8)
    pp, ends = transfer_span(s, "pp"), transfer_span(s, "pp_ends")
    assert (pp.size, pp.ranks_per_domain, pp.domains, pp.nodes) == (2, 1, 2, 2)
    assert (ends.size, ends.ranks_per_domain, ends.domains, ends.nodes) == (2, 1, 2, 2)
    far = transfer_span(_scn(tp=8, pp=2, gbs=2), "pp")
    assert (far.domains, far.nodes, far.tiers) == (2, 2, ("scale_out",))
    ends3 = transfer_span(_scn(tp=4, dp=2, pp=3, gbs=6), "pp_ends")  # 8·2 = 16 apart: another node
    assert (ends3.domains, transfer_span(_scn(tp=4, pp=3, gbs=3), "pp").domains) == (2, 2)
    inner = _scn(tp=2, dp=2, pp=4, gbs=8, placement=("tp", "pp", "cp", "ep", "dp"))
    for axis in ("pp", "pp_ends"):
        span = transfer_span(inner, axis)
        assert (span.ranks_per_domain, span.domains, span.nodes, span.tiers) == (2, 1, 1, ("scale_up",))


def test_pipeline_pairs_of_a_job_inside_one_domain_stay_on_it():
    """Every rank of a job no larger than one scale-up domain sits in it, whatever the stride: 8 GPUs of one DGX
    with tp 2, pp 4 (first and last stage 6 ranks apart, 6 not dividing 8), and 64 GPUs of a GB300 NVL72 rack with
    dp 16, pp 4 (stages 16 apart, 16 not dividing 72 — the corpus's Llama-3 70B runs), send over NVLink."""
    ends = transfer_span(_scn(tp=2, pp=4, gbs=4), "pp_ends")
    assert (ends.domains, ends.nodes) == (1, 1)
    nvl = system("gb300-nvl72")
    big = transfer_span(_scn("llama3-70b", sysm=nvl, dp=16, pp=4, gbs=64), "pp")
    assert (big.domains, big.nodes, big.tiers) == (1, 2, ("scale_up",))
    rack_and_more = transfer_span(_scn("llama3-70b", sysm=nvl, dp=32, pp=4, gbs=128), "pp")  # 128 GPUs > 72
    assert rack_and_more.tiers == ("scale_out",)


def test_expert_gradient_sync_is_data_parallel_time():
    """Mixtral, dp 8, ep 4: experts are replicated over an expert-dp group of 8/4 = 2 and their gradients are
    all-reduced there; that time is exposed data-parallel communication (bucketed, behind backward), like the
    dense gradients', never pipeline time."""
    pred = predict(_scn("mixtral-8x7b", dp=8, ep=4, gbs=8, dp_overlap=True), CAL)
    rows = [t for t in pred.transfers if t.phase == "step"]
    assert {t.axis for t in rows} == {"dp", "edp"}
    assert pred.breakdown_s["exposed_pp_comm"] == 0.0
    assert pred.breakdown_s["exposed_dp_comm"] == pytest.approx(sum(t.exposed_s for t in rows))
    assert all(t.exposed_s < t.total_s for t in rows)  # overlapped with the backward


def test_oversubscribed_fabric_stretches_the_all_to_all_bandwidth_term():
    """DeepSeek-V3 on 64 nodes of a 2:1 fat tree, tp = etp = 8, ep 64 (8 expert groups, one rank on every node):
    every group's all-to-all runs at once, so the bandwidth part of each (time − latency) is stretched by the
    max-min slowdown f of the ep axis (network.contention), the latency part is not."""
    tiers = tuple(dataclasses.replace(t, oversubscription=2.0, topology="fat_tree") if t.name == "scale_out" else t
                  for t in H100.tiers)
    sysm = dataclasses.replace(H100, tiers=tiers)
    scn = _scn("deepseek-v3", sysm, tp=8, dp=64, ep=64, gbs=64)
    f = concurrent_slowdown(scn.plan, sysm, "ep")
    assert f > 1.0
    row = next(t for t in predict(scn, CAL).transfers if t.name == "ep.dispatch_combine")
    alone = collective_time("all_to_all", row.message_bytes, transfer_span(scn, "ep"), sysm, CAL)
    assert row.time_each_s == pytest.approx(alone.latency_s + (alone.time_s - alone.latency_s) * f)


def test_rows_of_several_layer_kinds_merge():
    """DeepSeek-V3 (3 dense + 58 MoE layers with a shared expert, and its MTP module's MoE block) on tp 2: every
    block enters and leaves tensor parallelism twice per layer, the attention block gathering MLA's latents
    (4096·2112·2 = 17,301,504 B) and the MLP block (dense or shared expert) the hidden state (4096·7168·2 =
    58,720,256 B), each message alike in every kind of layer, so the step shows one all-gather row per message and
    phase with 61 + 1 = 62 calls per micro-batch, its total the sum of all kinds'."""
    pred = predict(_scn("deepseek-v3", tp=2, dp=8, ep=8, etp=1, gbs=8, sequence_parallel=True), CAL)
    rows = sorted((t for t in pred.transfers if t.name == "tp.all_gather" and t.phase == "fwd"),
                  key=lambda t: t.message_bytes)
    assert [(t.message_bytes, t.count) for t in rows] == [(17_301_504, 62), (58_720_256, 62)]
    assert all(t.total_s == pytest.approx(62 * t.time_each_s) for t in rows)


def test_host_copies_use_the_host_link_or_the_device_host_level():
    """A copy to host memory: latency of the device's host level (2 µs) + bytes over the system's per-GPU host
    link (50 GB/s); without a system figure, over the device's own host level (50 GB/s on H100)."""
    from narrowpath.schedule.step import host_copy_cost
    assert host_copy_cost(1e9, H100).time_s == pytest.approx(2e-6 + 1e9 / 50e9)
    bare = dataclasses.replace(H100, host_bw_bytes_per_s_per_gpu=0.0)
    assert host_copy_cost(1e9, bare).time_s == pytest.approx(2e-6 + 1e9 / H100.device.level("host").bw_bytes_per_s)


def test_assumptions_state_the_conventions():
    pred = predict(_scn(tp=8, gbs=2), CAL)
    a = pred.assumptions
    assert a[1] == ("attention kernel: flash (profile default); the fitted rate split between the passes: forward "
                    "1.16x, backward 0.95x (cuDNN's backward at 499/609 of its forward per FLOP, FlashAttention-3)")
    assert a[2] == "pipeline schedule: 1f1b, 2 micro-batches"
    assert a[3] == ("MFU counts model FLOPs: 3x forward matmul + attention FLOPs, no recompute, full (non-causal) "
                    "scores (Korthikanti et al. 2022 §6); HFU counts executed FLOPs incl. recompute; both against the "
                    "bf16 dense matrix peak, 989 TFLOP/s per GPU")
    assert a[4] == "gradients accumulated and communicated in fp32"
    assert predict(_scn(tp=8, gbs=2, precision="fp16"), CAL).assumptions[4] == "gradients accumulated and communicated in fp16"


def test_profile_usage_names_every_entry_read():
    """The H100 profile's figures (catalog/calibration.yaml) as the prediction reports them; a tier the profile
    lacks is the default 0.80 / 5 µs and says so; measured tables are announced with their size."""
    no_fe = dataclasses.replace(CAL, tiers={k: v for k, v in CAL.tiers.items() if k != "front_end"})
    assert profile_usage(no_fe, "bf16", {"scale_up", "front_end"}) == (
        "calibration profile H100-SXM5-80GB used: matrix bf16: eff_max 0.55, F_half 6e+09 FLOP; HBM eff 0.85; "
        "kernel overhead 4.0 us; front_end: busbw eff 0.80, alpha 5.0 us (default, not in profile); "
        "scale_up: busbw eff 0.82, alpha 5.0 us")
    assert profile_usage(CAL, "fp8", set()).startswith(
        "calibration profile H100-SXM5-80GB used: matrix fp8: eff_max 0.55, F_half 6e+09 FLOP; ")
    tables = dataclasses.replace(CAL, matrix_efficiency_by_size={"bf16": ((1e9, 0.2), (1e10, 0.5), (1e12, 0.8))},
                                 tiers={"scale_up": TierCalibration(bw_efficiency=0.8, alpha_s=3e-6,
                                                                    busbw_efficiency_by_size=((1e6, .5), (1e9, .8)))})
    assert profile_usage(tables, "bf16", {"scale_up"}) == (
        "calibration profile H100-SXM5-80GB used: matrix bf16: measured table (3 sizes, 0.20..0.80); HBM eff 0.85; "
        "kernel overhead 4.0 us; scale_up: busbw eff 0.80, alpha 3.0 us, measured busbw table (2 sizes)")


def test_a_head_width_other_than_128_is_stated_with_its_rate():
    """Llama-3 8B's heads are 128 wide: the profile's flash rate, split between the passes. The same model with 64-wide
    heads (64 of them, GPT-OSS's shape) says how its kernel is rated: 408/609 = 0.67 forward and 417/499 = 0.84
    backward (FlashAttention-3 Figs. 5-6); unfused attention has no such note."""
    base = _scn(tp=8, gbs=2)
    narrow = dataclasses.replace(base, model=dataclasses.replace(base.model, heads=64, head_dim=64))
    split = ("; the fitted rate split between the passes: forward 1.16x, backward 0.95x (cuDNN's backward at 499/609 "
             "of its forward per FLOP, FlashAttention-3)")
    assert predict(base, CAL).assumptions[1] == "attention kernel: flash (profile default)" + split
    p = predict(narrow, CAL)
    assert p.assumptions[1] == ("attention kernel: flash (profile default); head width 64: 0.67 of the profile's "
                                "128-wide rate forward, 0.84 backward (cuDNN, FlashAttention-3 Figs. 5-6)" + split)
    unfused = dataclasses.replace(narrow, plan=dataclasses.replace(narrow.plan, attention="unfused"))
    assert predict(unfused, CAL).assumptions[1] == "attention kernel: unfused"
