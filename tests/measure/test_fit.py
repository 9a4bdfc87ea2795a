"""Fits recover known parameters from synthetic measurements (seeded noise)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from narrowpath.measure.busbw import bus_factor, ring_steps
from narrowpath.measure.fit import fit_alpha_beta, fit_line_rel, fit_matrix_ramp


@dataclass(frozen=True)
class TC:
    op: str
    num_ranks: int
    alpha_s: float
    busbw_bytes_per_s: float


CASES = [TC("all_reduce", 8, 5e-6, 230e9), TC("all_gather", 4, 2e-5, 10e9), TC("reduce_scatter", 2, 1e-4, 1e9),
         TC("all_to_all", 16, 8e-6, 40e9), TC("send_recv", 2, 3e-5, 5e9)]


@pytest.mark.parametrize("tc", CASES, ids=lambda tc: f"{tc.op}-{tc.num_ranks}")
def test_alpha_beta_recovered(tc):
    """t = steps·α + S·factor/busbw with 2 % noise: α and busbw come back within 10 %."""
    rng = np.random.default_rng(7)
    sizes = [1024 * 2 ** k for k in range(0, 20)]
    t = [ring_steps(tc.op, tc.num_ranks) * tc.alpha_s + s * bus_factor(tc.op, tc.num_ranks) / tc.busbw_bytes_per_s
         for s in sizes]
    t = [v * (1 + 0.02 * rng.standard_normal()) for v in t]
    ab = fit_alpha_beta(tc.op, tc.num_ranks, sizes, t)
    assert ab.alpha_s == pytest.approx(tc.alpha_s, rel=0.1)
    assert ab.busbw_bytes_per_s == pytest.approx(tc.busbw_bytes_per_s, rel=0.1)
    assert ab.fit.rms_rel_residual < 0.04
    held = [s * 1.5 for s in sizes]
    for s in held:
        truth = ring_steps(tc.op, tc.num_ranks) * tc.alpha_s + s * bus_factor(tc.op, tc.num_ranks) / tc.busbw_bytes_per_s
        assert ab.predict_s(s) == pytest.approx(truth, rel=0.05)


def test_exact_data_is_fitted_exactly():
    sizes = [1e3, 1e5, 1e7]
    ab = fit_alpha_beta("all_reduce", 2, sizes, [10e-6 * 2 + s / 1e9 for s in sizes])
    assert ab.alpha_s == pytest.approx(10e-6) and ab.busbw_bytes_per_s == pytest.approx(1e9)
    assert ab.fit.rms_rel_residual == pytest.approx(0, abs=1e-9)


def test_negative_intercept_is_clamped_to_zero():
    """Pure-bandwidth data with noise never yields a negative latency."""
    fit = fit_line_rel([1, 2, 4, 8], [0.9, 2.1, 4.0, 8.0])
    assert fit.intercept_s >= 0 and fit.slope_s_per_unit > 0


def test_matrix_ramp_recovered():
    """attained = R∞·F/(F+F½): R∞ and F½ come back from a sweep of sizes."""
    flop = [2.0 * n ** 3 for n in (64, 128, 256, 512, 1024, 2048, 4096)]
    rate = [300e9 * f / (f + 4e8) for f in flop]
    ramp = fit_matrix_ramp(flop, rate)
    assert ramp.rate_flop_per_s == pytest.approx(300e9, rel=1e-6)
    assert ramp.half_flop == pytest.approx(4e8, rel=1e-6)


def test_one_point_ramp_is_its_rate():
    ramp = fit_matrix_ramp([1.1e12], [730e12])
    assert ramp.rate_flop_per_s == pytest.approx(730e12)


def test_knee_fit_recovers_two_regimes():
    """In-cache 2 GB/s up to 4 MiB, 0.8 GB/s beyond (2 % noise): the knee, both slopes and held-out sizes."""
    from narrowpath.measure.fit import fit_line_knee
    rng = np.random.default_rng(3)
    knee, a, b1, b2 = 4 * 2**20, 80e-6, 1 / 2e9, 1 / 0.8e9

    def truth(s):
        return a + b1 * min(s, knee) + b2 * max(s - knee, 0)
    sizes = [1024 * 2 ** k for k in range(0, 17)]
    t = [truth(s) * (1 + 0.02 * rng.standard_normal()) for s in sizes]
    fit = fit_line_knee(sizes[0::2], t[0::2])
    assert fit.knee_bytes == knee
    assert fit.slope_s_per_byte == pytest.approx(b1, rel=0.1)
    assert fit.slope_beyond_s_per_byte == pytest.approx(b2, rel=0.1)
    assert all(fit.predict_s(s) == pytest.approx(truth(s), rel=0.06) for s in sizes[1::2])
    line = fit_line_rel(sizes[0::2], t[0::2])  # one line misses the sizes beyond the knee
    assert max(abs(line.predict_s(s) / truth(s) - 1) for s in sizes[1::2]) > 0.2


def test_knee_fit_on_one_line_is_the_line():
    """Straight-line data: the two-regime fit predicts like the line (any knee found has b' ≈ b)."""
    from narrowpath.measure.fit import fit_line_knee
    sizes = [1024 * 2 ** k for k in range(0, 17)]
    t = [50e-6 + s / 1.5e9 for s in sizes]
    fit = fit_line_knee(sizes, t)
    assert all(fit.predict_s(s) == pytest.approx(50e-6 + s / 1.5e9, rel=1e-6) for s in sizes)


def test_launch_floor_is_left_out_of_the_ramp():
    """GEMMs issued one by one from the host take max(launch interval, kernel time): t = max(20 µs, (F + F½)/R∞)
    with R∞ = 700 TFLOP/s, F½ = 2 GFLOP. Fitted through the flat small sizes the ramp would read the 20 µs floor
    as F½ and put R∞ above every measured rate; left out, R∞ and F½ come back."""
    from narrowpath.measure.fit import floor_bound_points
    flop = [2.0 * n ** 3 for n in (256, 512, 1024, 2048, 4096, 8192, 16384)]
    t = [max(20e-6, (f + 2e9) / 700e12) for f in flop]
    # 256, 512, 1024 sit on the floor; 2048 (27.4 µs, within 1.5x of it) goes too, three points stay
    assert floor_bound_points(flop, t) == 4
    ramp = fit_matrix_ramp(flop, [f / x for f, x in zip(flop, t)], floor=True)
    assert ramp.floor_points == 4
    assert ramp.rate_flop_per_s == pytest.approx(700e12, rel=1e-6)
    assert ramp.half_flop == pytest.approx(2e9, rel=1e-6)


def test_floor_points_are_kept_when_too_few_would_remain():
    from narrowpath.measure.fit import floor_bound_points
    assert floor_bound_points([1, 2, 3, 100], [1.0, 1.1, 1.2, 50.0]) == 0  # one point would remain
    assert floor_bound_points([1, 2, 30, 40, 50], [1.0, 3.0, 30.0, 40.0, 50.0]) == 0  # only one point is flat
    assert floor_bound_points([1, 2, 30, 40, 50], [1.0, 1.4, 30.0, 40.0, 50.0]) == 2


def test_h200_probe_calibrates_to_its_measured_rates():
    """`narrowpath probe compute` on the project's H200 (benchmarks/data/h200/probe_compute.json, GEMMs issued one
    by one): the bf16 sizes 256-2,048 sit at 18-24 µs, the large ones at 0.70-0.77 of the 989 TFLOP/s peak. The
    fitted R∞ lies within the measured large-size rates (it was 0.90 of peak, 21 % residual, before the floor
    points were left out)."""
    import json
    from pathlib import Path
    data = json.loads((Path(__file__).resolve().parents[2] / "benchmarks/data/h200/probe_compute.json").read_text())
    rows = sorted((s for s in data["samples"] if s["backend"] == "torch-cuda" and s["dtype"] == "bf16"),
                  key=lambda s: s["flop"])
    ramp = fit_matrix_ramp([s["flop"] for s in rows], [s["flops_per_s"] for s in rows], floor=True)
    assert ramp.floor_points == 4
    big = [s["flops_per_s"] for s in rows if s["n"] >= 4096]
    assert min(big) <= ramp.rate_flop_per_s <= max(big)
    assert ramp.fit.rms_rel_residual < 0.06
    # without the floor switch (what a CPU sweep or a public table gets) every point is fitted
    assert fit_matrix_ramp([s["flop"] for s in rows], [s["flops_per_s"] for s in rows]).floor_points == 0


def test_a_gpu_fixed_cost_is_the_ramp_not_a_floor():
    """Graph-timed GEMMs (no launch floor): the flat small sizes are the ramp's own fixed cost, t = (F + F½)/R∞,
    and stay in the fit — F½ comes back (2 GFLOP at 800 TFLOP/s: 2.5 µs, the H200's graph-timed 256³ took 2.8)."""
    flop = [2.0 * n ** 3 for n in (256, 512, 1024, 2048, 4096, 8192)]
    rate = [800e12 * f / (f + 2e9) for f in flop]
    ramp = fit_matrix_ramp(flop, rate)
    assert ramp.floor_points == 0
    assert ramp.half_flop == pytest.approx(2e9, rel=1e-6)


def test_no_points_is_an_error_not_a_crash():
    from narrowpath.errors import NarrowpathError
    with pytest.raises(NarrowpathError):
        fit_matrix_ramp([], [], floor=True)
