"""Golden error band (analysis/band.py): the quantile construction worked out by hand on made-up residuals.

r = ln(predicted / measured) of the K = 10 nearest validated cases; an 80 % band takes their 10th and 90th
percentiles (numpy's linear interpolation: position q·(n − 1) in the sorted list), widens them about the median
by 1 + 0.25·(mean distance) (+ 1 when the plan is outside what was validated), scales the half-widths by the
calibrated `band_scale` (1 in the worked examples), keeps at least ±1 %, and the measured time is expected in
[t·e^(−q_hi), t·e^(−q_lo)]."""
from __future__ import annotations

import math

import pytest

from narrowpath.analysis.band import band_from_cases, distance

R = [-0.2, -0.1, -0.05, 0.0, 0.05, 0.1, 0.15, 0.2, 0.3, 0.4]
F = {"generation": "hopper", "format": "16-bit", "moe": False, "zero3": False, "cp": False, "pp": True,
     "tp_nodes": False, "log_params": 10.0, "log_gpus": 8.0, "log_seq": 13.0, "log_mbs": 0.0, "seq_len": 8192}


def cases(residuals, **change):
    return [{"id": f"c{i}", "features": dict(F, **change), "residual": r} for i, r in enumerate(residuals)]


def test_similarity_is_a_weighted_l1_distance():
    """Generation differs: 2.0; ZeRO-3 differs: 0.8; log2 GPUs 8 vs 10: 0.15·2 = 0.3; all three: 3.1."""
    assert distance(F, dict(F, generation="ampere")) == 2.0
    assert distance(F, dict(F, zero3=True, log_gpus=10.0)) == pytest.approx(1.1)
    assert distance(F, dict(F, generation="ampere", zero3=True, log_gpus=10.0)) == pytest.approx(3.1)


def test_band_from_ten_identical_cases():
    """Sorted residuals −0.2 … 0.4: the 10th percentile sits at position 0.9 → −0.2 + 0.9·0.1 = −0.11, the 90th at
    8.1 → 0.3 + 0.1·0.1 = 0.31; distance 0, nothing outside: no widening. Band [t·e^−0.31, t·e^0.11]."""
    b = band_from_cases(100.0, F, cases(R), scale=1.0)
    assert b.low_s == pytest.approx(100 * math.exp(-0.31)) and b.high_s == pytest.approx(100 * math.exp(0.11))
    assert b.inside and b.level == 0.8 and b.nearest == ("c0", "c1", "c2", "c3", "c4")


def test_band_widens_with_the_distance_to_the_cases():
    """The same residuals on cases that differ in ZeRO-3 (distance 0.8): widened by 1 + 0.25·0.8 = 1.2 about the
    median 0.075: q_lo = 0.075 − 0.185·1.2 = −0.147, q_hi = 0.075 + 0.235·1.2 = 0.357."""
    b = band_from_cases(100.0, F, cases(R, zero3=True), scale=1.0)
    assert b.low_s == pytest.approx(100 * math.exp(-0.357)) and b.high_s == pytest.approx(100 * math.exp(0.147))


def test_only_the_ten_nearest_cases_count():
    """Two far cases (another generation) with residual 5 are beyond the 10 nearest and change nothing."""
    far = [{"id": "far", "features": dict(F, generation="ampere"), "residual": 5.0}] * 2
    b = band_from_cases(100.0, F, far + cases(R), scale=1.0)
    assert b.low_s == pytest.approx(100 * math.exp(-0.31)) and b.high_s == pytest.approx(100 * math.exp(0.11))


def test_outside_the_validated_regimes_widens_and_says_why():
    """A generation no case has: reason given, inside False; distance 2.0 to all → widen 1 + 0.5 + 1 = 2.5:
    q_lo = 0.075 − 0.185·2.5 = −0.3875, q_hi = 0.075 + 0.235·2.5 = 0.6625."""
    b = band_from_cases(100.0, dict(F, generation="rubin"), cases(R), scale=1.0)
    assert not b.inside and "no validated run on rubin hardware" in b.reason
    assert b.low_s == pytest.approx(100 * math.exp(-0.6625)) and b.high_s == pytest.approx(100 * math.exp(0.3875))


def test_band_is_never_tighter_than_one_percent_and_defaults_without_cases():
    """Residuals all 0: ±1 %. No case at all: [t/2, 2t], outside."""
    b = band_from_cases(100.0, F, cases([0.0] * 10), scale=1.0)
    assert b.low_s == pytest.approx(100 * math.exp(-0.01)) and b.high_s == pytest.approx(100 * math.exp(0.01))
    empty = band_from_cases(100.0, F, [])
    assert (empty.low_s, empty.high_s, empty.inside) == (50.0, 200.0, False)


def test_the_band_reads_the_out_of_fold_residuals_where_a_case_has_them():
    """A case's `residual_oof` (its source held out of the fit) stands for its in-sample residual: the same ten
    cases with in-sample residuals all 0 and out-of-fold ones R give R's band, [t·e^−0.31, t·e^0.11]."""
    cs = [dict(c, residual=0.0, residual_oof=r) for c, r in zip(cases(R), R)]
    b = band_from_cases(100.0, F, cs, scale=1.0)
    assert b.low_s == pytest.approx(100 * math.exp(-0.31)) and b.high_s == pytest.approx(100 * math.exp(0.11))


def test_outside_is_judged_by_the_nearest_case_not_the_mean_of_ten():
    """One case identical to the plan (distance 0) and nine another generation away (2.0 each, +0.6 of model size:
    2.6): the mean of the ten is 2.34 > OUTSIDE_DISTANCE 2.0, but the nearest is 0 — inside (fifty-sixth session's
    review: llm-foundry's MPT-1B FP8 row was 'far from every validated run' with itself at distance 0). Ten cases
    of the same generation that differ in MoE and ZeRO-3 (1.5 + 0.8 = 2.3) and none nearer: outside, the nearest
    distance named."""
    near = cases(R[:1]) + cases(R[1:], generation="ampere", log_params=11.0)
    b = band_from_cases(100.0, F, near)
    assert b.inside and b.nearest[0] == "c0"
    b = band_from_cases(100.0, F, cases(R, moe=True, zero3=True))
    assert not b.inside and b.reason == "far from every validated run (distance 2.3 to the nearest)"


def test_a_device_or_format_no_case_has_is_outside():
    """Same generation and format, another part (H20 beside H100 runs): outside, the device named; fp32 is a format
    of its own, not '16-bit' (a 76.6 s fp32 step was 'within the validated regimes' on bf16 runs' residuals)."""
    cs = cases(R, device="H100-SXM5-80GB")
    assert band_from_cases(100.0, dict(F, device="H100-SXM5-80GB"), cs).inside
    b = band_from_cases(100.0, dict(F, device="H20"), cs)
    assert not b.inside and "no validated run on H20 (only other hopper parts)" in b.reason
    from narrowpath.analysis.band import _FORMAT
    assert _FORMAT["fp32"] == "fp32" and _FORMAT["bf16"] == _FORMAT["fp16"] == "16-bit"


def test_tensor_parallelism_placed_across_servers_is_outside():
    """tp 8 placed outermost on 8-GPU servers (placement dp, tp, …) spans eight servers: its collectives go over
    the scale-out fabric although tp ≤ the scale-up domain, and no validated run does that (fifty-sixth session's
    review: 45.8 s, 62 % of it exposed tp traffic, was 'within the validated regimes')."""
    import dataclasses

    from narrowpath.analysis.band import error_band, features, tp_crosses_scale_out
    from narrowpath.catalog import load_scenario
    scn = load_scenario("llama3-70b-h100-256")
    assert scn.plan.tp == 8 and not tp_crosses_scale_out(scn) and not features(scn)["tp_nodes"]
    outer = dataclasses.replace(scn, plan=dataclasses.replace(scn.plan, placement=("dp", "tp", "cp", "ep", "pp")))
    assert tp_crosses_scale_out(outer) and features(outer)["tp_nodes"]
    b = error_band(outer, 45.8)
    assert not b.inside and "tensor parallelism across scale-up domains" in b.reason


def test_the_scale_multiplies_the_half_widths_about_the_median():
    """R's band (centre 0.075, q 10/90 −0.11 / 0.31): at scale 2 the half-widths double about the median:
    q_lo = 0.075 − 0.185·2 = −0.295, q_hi = 0.075 + 0.235·2 = 0.545."""
    b = band_from_cases(100.0, F, cases(R), scale=2.0)
    assert b.low_s == pytest.approx(100 * math.exp(-0.545)) and b.high_s == pytest.approx(100 * math.exp(0.295))


def test_band_scale_is_the_smallest_that_holds_the_level_out_of_source():
    """Split-conformal calibration of the width (validate.regenerate.band_scale): two sources of ten cases each,
    identical features; A's residuals R, B's R shifted by +0.2, each judged against the band of the other source's
    cases. The smallest grid scale at which 16 of the 20 lie inside (brute force here) is band_scale's, above 1
    (the shift is wider than either source's scatter); with a third source like A and B held out of the
    calibration (nested), less width is needed."""
    from narrowpath.validate.regenerate import SCALE_GRID, _held_out, _inside, band_scale
    recs = [{"id": f"a{i}", "source": "A", "features": F, "residual": r} for i, r in enumerate(R)]
    recs += [{"id": f"b{i}", "source": "B", "features": F, "residual": r + 0.2} for i, r in enumerate(R)]
    held = _held_out(recs, frozenset())
    assert len(held) == 20
    want = next(s for s in SCALE_GRID if sum(_inside(r, p, s) for r, p in held) >= 16)
    assert band_scale(recs) == want > 1.0
    recs += [{"id": f"c{i}", "source": "C", "features": F, "residual": r} for i, r in enumerate(R)]
    assert band_scale(recs, frozenset({"B"})) < band_scale(recs)
