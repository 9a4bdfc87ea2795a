"""Golden checks against the papers' closed forms (Narayanan et al. SC'21 eq. 2 and 3; Korthikanti et al. 2022)."""
from __future__ import annotations

import dataclasses

import pytest

from narrowpath.catalog import model, system
from narrowpath.cost.flops import korthikanti_model_flop, narayanan_eq3_flop
from narrowpath.cost.memory import in_flight_microbatches, layer_activation_bytes
from narrowpath.schedule import predict
from narrowpath.schedule.pipeline import bubble_fraction, pipeline_time_s
from narrowpath.spec import Plan, Scenario
from narrowpath.workload.counts import parameter_count

GPT = ["gpt-1.7b", "gpt-18.4b", "gpt-145.6b", "gpt-1t"]


@pytest.mark.parametrize("mid", GPT)
def test_parameter_count_matches_narayanan_eq2(mid):
    """P = 12·l·h²·(1 + 13/(12h) + (V + s)/(12·l·h)) for tied embeddings (+ the final layer norm's 2h)."""
    m = dataclasses.replace(model(mid), tied_embeddings=True)
    l, h, V, s = m.layers, m.hidden, m.vocab, m.seq_len
    eq2 = 12 * l * h * h * (1 + 13 / (12 * h) + (V + s) / (12 * l * h))
    assert parameter_count(m) == pytest.approx(eq2 + 2 * h, rel=1e-12)


def test_paper_parameter_counts_are_reproduced():
    """Table 1 of Narayanan et al. lists 1.7B … 1008B; our counts (untied output layer adds V·h) round to them."""
    for mid, billions in [("gpt-1.7b", 1.7), ("gpt-39.1b", 39.1), ("gpt-145.6b", 145.6), ("gpt-1t", 1008)]:
        m = dataclasses.replace(model(mid), tied_embeddings=True)
        assert parameter_count(m) / 1e9 == pytest.approx(billions, rel=0.04)


def _scn(mid, **kw):
    plan = Plan(**kw)
    return Scenario(system=system("dgx-a100"), model=model(mid), plan=plan, num_gpus=plan.num_gpus)


@pytest.mark.parametrize("mid, kw", [
    ("gpt-1.7b", dict(dp=32, mbs=16, gbs=512)),
    ("gpt-145.6b", dict(tp=8, pp=8, dp=24, vpp=2, mbs=2, gbs=2304)),
])
def test_hardware_flops_match_narayanan_eq3_with_full_recompute(mid, kw):
    """With full recompute, unfused attention and f = 4h, executed FLOPs = 96·B·s·l·h²·(1 + s/6h + V/16lh)."""
    scn = _scn(mid, recompute="full", precision="fp16", attention="unfused", **kw)
    p = predict(scn)
    m = scn.model
    assert p.hardware_flop_per_step == pytest.approx(
        narayanan_eq3_flop(scn.plan.gbs, m.seq_len, m.layers, m.hidden, m.vocab), rel=1e-9)
    assert p.model_flop_per_step == pytest.approx(
        korthikanti_model_flop(scn.plan.gbs, m.seq_len, m.layers, m.hidden, m.vocab), rel=1e-9)
    assert p.hfu > p.mfu


@pytest.mark.parametrize("t, sp, recompute, expect", [
    (1, False, "none", lambda s, b, h, a, t: s * b * h * (34 + 5 * a * s / h)),
    (8, False, "none", lambda s, b, h, a, t: s * b * h * (10 + 24 / t + 5 * a * s / (h * t))),
    (8, True, "none", lambda s, b, h, a, t: s * b * h * (34 / t + 5 * a * s / (h * t))),
    (8, True, "selective", lambda s, b, h, a, t: s * b * h * 34 / t),
    (8, False, "full", lambda s, b, h, a, t: 2 * s * b * h),
    (8, True, "full", lambda s, b, h, a, t: 2 * s * b * h / t),
])
def test_activation_memory_matches_korthikanti(t, sp, recompute, expect):
    """Korthikanti et al. 2022 eqs. (1)-(6): activation bytes per layer for 16-bit training."""
    scn = _scn("gpt-18.4b", tp=t, mbs=2, gbs=2, sequence_parallel=sp, recompute=recompute, precision="fp16",
               attention="unfused")
    m = scn.model
    assert layer_activation_bytes(scn, "unfused") == pytest.approx(expect(m.seq_len, 2, m.hidden, m.heads, t))


def test_in_flight_microbatches_1f1b_and_interleaved():
    """1F1B: stage i holds p − i; interleaved: the first stage holds p·(1 + (p−1)/(p·v)) (Korthikanti §4.2.3)."""
    s = _scn("gpt-145.6b", tp=8, pp=8, mbs=1, gbs=64)
    assert [in_flight_microbatches(i, s) for i in (0, 3, 7)] == [8, 5, 1]
    si = _scn("gpt-145.6b", tp=8, pp=8, vpp=2, mbs=1, gbs=64)
    assert in_flight_microbatches(0, si) == pytest.approx(8 * (1 + 7 / 16))
    few = _scn("gpt-145.6b", tp=8, pp=8, mbs=1, gbs=3)
    assert in_flight_microbatches(0, few) == 3


def test_pipeline_formulas():
    """(m + p − 1)·T for 1F1B; bubble (p − 1)/(v·m) for interleaving (Narayanan et al. SC'21 §2.2)."""
    assert pipeline_time_s([1.0] * 4, 8) == pytest.approx(11.0)
    assert pipeline_time_s([1.0] * 4, 8, vpp=3) == pytest.approx(8 + 3 / 3)
    assert bubble_fraction(8, 32, 2) == pytest.approx(7 / 64)
    # unequal stages follow the exact 1F1B schedule (the simulator's): the slow last stage works m·T without a
    # pause once micro-batch 0 reaches it (F_0), then the last gradient returns through stage 0 (B_0); with
    # backward = 2 x forward: F = (1/3, 2/3), B = (2/3, 4/3) -> 1/3 + 10·2 + 2/3 = 21 (was m·T_max + (p-1)·T_mean)
    assert pipeline_time_s([1.0, 2.0], 10) == pytest.approx(1 / 3 + 10 * 2 + 2 / 3)


def test_uneven_layer_split_lightens_first_and_last_stage():
    """Llama 3 405B: 126 layers on 16 stages, one fewer on the first and last (Dubey et al. 2024 §3.3.2)."""
    from narrowpath.workload.split import stage_layer_ranges
    counts = [sum(len(r) for r in st) for st in stage_layer_ranges(126, 16, 1)]
    assert counts == [7] + [8] * 14 + [7]
    ranges = [r for st in stage_layer_ranges(61, 16, 1) for r in st]
    assert sorted(i for r in ranges for i in r) == list(range(61))  # every layer once
    counts = [sum(len(r) for r in st) for st in stage_layer_ranges(61, 16, 1)]
    assert counts[0] == counts[-1] == 3 and max(counts) == 4 and sum(counts) == 61
    counts = [sum(len(r) for r in st) for st in stage_layer_ranges(7, 2, 1)]  # no middle stage: first takes it
    assert counts == [4, 3]


def test_kv_heads_replicate_when_tp_exceeds_them():
    """GQA with fewer key/value heads than tp ranks: each rank holds one whole K and V head (not a fraction)."""
    import dataclasses as dc

    from narrowpath.catalog import model as catalog_model
    from narrowpath.spec import Plan
    from narrowpath.workload import transformer as T
    m = dc.replace(catalog_model("llama3-8b"), kv_heads=4)  # 32 heads, head_dim 128
    plan = Plan(tp=8, dp=1, mbs=1, gbs=1)
    assert T.kv_width_per_rank(m, 8) == m.head_dim
    assert T.kv_width_per_rank(m, 2) == 2 * m.head_dim
    qkv = next(op for op in T.layer_forward_ops(m, plan, "flash") if op.name == "qkv")
    tokens = plan.mbs * m.seq_len
    assert qkv.flop == 2.0 * tokens * m.hidden * (m.q_dim / 8 + 2 * m.head_dim)
    h = m.hidden
    assert T.layer_params(m, plan) == h * (m.q_dim / 8 + 2 * m.head_dim) + m.q_dim * h / 8 + 2 * h \
        + m.mlp_matrices * h * m.ffn / 8


def test_moe_expert_gemms_are_grouped_per_local_expert():
    """A rank's num_experts/ep experts share its routed tokens: one grouped GEMM per matrix whose efficiency is that
    of one expert's GEMM and whose weights are all local experts' (so expert parallelism makes each expert's GEMM
    bigger and reads fewer weights per rank)."""
    from narrowpath.catalog import calibration_for, model as catalog_model, system as catalog_system
    from narrowpath.cost.roofline import compute_time_s, op_time_s
    from narrowpath.spec import Plan, Scenario
    from narrowpath.workload.build import build_workload
    m, sysm = catalog_model("deepseek-v3"), catalog_system("dgx-h100")
    cal = calibration_for(sysm.device.name)

    def expert_up(ep: int):
        plan = Plan(tp=1, pp=1, dp=256, ep=ep, mbs=1, gbs=256, moe_routing="token-drop")
        wl = build_workload(Scenario(name="t", system=sysm, model=m, plan=plan, num_gpus=256), "flash")
        return next(op for st in wl.stages for op, _ in st.ops if op.name.startswith("expert_") and
                    op.phase == "fwd" and op.kind == "matrix")
    ops = {ep: expert_up(ep) for ep in (1, 8, 64, 256)}
    assert ops[1].groups == m.moe.num_experts and ops[64].groups == m.moe.num_experts // 64
    assert len({op.flop for op in ops.values()}) == 1  # the same token-expert work per rank (capacity-padded)
    assert ops[1].weight_bytes == 64 * ops[64].weight_bytes  # all local experts' weights
    times = [compute_time_s(ops[ep], sysm.device, cal) for ep in (1, 8, 64, 256)]
    assert times == sorted(times, reverse=True) and times[0] > 1.5 * times[-1]  # bigger expert GEMMs run faster
    totals = [op_time_s(ops[ep], sysm.device, cal) for ep in (1, 8, 64, 256)]
    assert totals == sorted(totals, reverse=True)


def test_batched_gemm_reads_and_writes_every_batch():
    """A batch of 3 activation-by-activation GEMMs [4×8]·[8×16] in bf16 (unfused attention's shape): 2·4·8·16·3 =
    3,072 FLOPs; bytes 4·8·2·3 (first inputs) + 8·16·2·3 (second inputs) + 4·16·2·3 (outputs) = 192 + 768 + 384."""
    from narrowpath.workload.ops import gemm
    op = gemm("scores", "fwd", 4, 8, 16, "bf16", 2, 2, weights=False, batch=3)
    assert (op.flop, op.hbm_bytes, op.weight_bytes) == (3072, 1344, 0.0)
