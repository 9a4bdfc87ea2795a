"""Golden error band (analysis/band.py): the quantile construction worked out by hand on made-up residuals.

r = ln(predicted / measured) of the K = 10 nearest validated cases; an 80 % band takes their 10th and 90th
percentiles (numpy's linear interpolation: position q·(n − 1) in the sorted list), widens them about the median
by 1 + 0.25·(mean distance) (+ 1 when the plan is outside what was validated), keeps at least ±1 %, and the
measured time is expected in [t·e^(−q_hi), t·e^(−q_lo)]."""
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
    b = band_from_cases(100.0, F, cases(R))
    assert b.low_s == pytest.approx(100 * math.exp(-0.31)) and b.high_s == pytest.approx(100 * math.exp(0.11))
    assert b.inside and b.level == 0.8 and b.nearest == ("c0", "c1", "c2", "c3", "c4")


def test_band_widens_with_the_distance_to_the_cases():
    """The same residuals on cases that differ in ZeRO-3 (distance 0.8): widened by 1 + 0.25·0.8 = 1.2 about the
    median 0.075: q_lo = 0.075 − 0.185·1.2 = −0.147, q_hi = 0.075 + 0.235·1.2 = 0.357."""
    b = band_from_cases(100.0, F, cases(R, zero3=True))
    assert b.low_s == pytest.approx(100 * math.exp(-0.357)) and b.high_s == pytest.approx(100 * math.exp(0.147))


def test_only_the_ten_nearest_cases_count():
    """Two far cases (another generation) with residual 5 are beyond the 10 nearest and change nothing."""
    far = [{"id": "far", "features": dict(F, generation="ampere"), "residual": 5.0}] * 2
    b = band_from_cases(100.0, F, far + cases(R))
    assert b.low_s == pytest.approx(100 * math.exp(-0.31)) and b.high_s == pytest.approx(100 * math.exp(0.11))


def test_outside_the_validated_regimes_widens_and_says_why():
    """A generation no case has: reason given, inside False; distance 2.0 to all → widen 1 + 0.5 + 1 = 2.5:
    q_lo = 0.075 − 0.185·2.5 = −0.3875, q_hi = 0.075 + 0.235·2.5 = 0.6625."""
    b = band_from_cases(100.0, dict(F, generation="rubin"), cases(R))
    assert not b.inside and "no validated run on rubin hardware" in b.reason
    assert b.low_s == pytest.approx(100 * math.exp(-0.6625)) and b.high_s == pytest.approx(100 * math.exp(0.3875))


def test_band_is_never_tighter_than_one_percent_and_defaults_without_cases():
    """Residuals all 0: ±1 %. No case at all: [t/2, 2t], outside."""
    b = band_from_cases(100.0, F, cases([0.0] * 10))
    assert b.low_s == pytest.approx(100 * math.exp(-0.01)) and b.high_s == pytest.approx(100 * math.exp(0.01))
    empty = band_from_cases(100.0, F, [])
    assert (empty.low_s, empty.high_s, empty.inside) == (50.0, 200.0, False)


def test_the_band_reads_the_out_of_fold_residuals_where_a_case_has_them():
    """A case's `residual_oof` (its source held out of the fit) stands for its in-sample residual: the same ten
    cases with in-sample residuals all 0 and out-of-fold ones R give R's band, [t·e^−0.31, t·e^0.11]."""
    cs = [dict(c, residual=0.0, residual_oof=r) for c, r in zip(cases(R), R)]
    b = band_from_cases(100.0, F, cs)
    assert b.low_s == pytest.approx(100 * math.exp(-0.31)) and b.high_s == pytest.approx(100 * math.exp(0.11))
