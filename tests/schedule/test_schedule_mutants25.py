"""Schedule values the seed-25 mutation sample (benchmarks/mutation.py) found unguarded in schedule/: stages exactly
the equality tolerance apart, the default size of an interleaved schedule's last micro-batch group, and a network
tier's latency printed in microseconds — each pinned by a hand value."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import narrowpath.schedule.pipeline as P
from narrowpath.catalog import calibration_for, system
from narrowpath.schedule.step import profile_usage
from narrowpath.search.pipeline_bulk import pipeline_times
from narrowpath.spec.calibration import TierCalibration


def test_stages_exactly_the_tolerance_apart_are_equal_stages_in_predict_and_in_the_search():
    """Stage times count as equal when max − min <= 1e-12·max (schedule.pipeline's _REL_EQUAL; the search's
    vectorised pricing, search.pipeline_bulk, makes the same test and must give the same number, bit for bit,
    since the search ranks plans by it and predict reports them by the scalar one). Two stages of
    hi = 10¹²·2⁻⁴⁶ s (14.2 ms) and hi − 2⁻⁴⁶ s lie exactly at the tolerance (1e-12·hi = 2⁻⁴⁶ exactly, and the
    difference is exact), so both take Narayanan's form m·t_max + (p − 1)·t_mean/v: 8·hi + (lo + hi)/2."""
    hi = 1e12 * 2.0 ** -46
    lo = hi - 1e-12 * hi
    assert 1e-12 * hi == 2.0 ** -46 and hi - lo == 2.0 ** -46  # exactly at the tolerance
    narayanan = 8 * hi + (lo + hi) / 2
    assert P.pipeline_time_s([lo, hi], 8) == narayanan
    T = np.array([[lo, hi]])
    bulk = pipeline_times(T, T / 3.0, np.array([8]), 1, None, np.zeros(1))
    assert bulk[0] == narayanan == P.pipeline_time_s([lo, hi], 8)


def test_an_unstated_last_group_is_a_full_group():
    """fill_drain_latency_s's `last_group` left at 0 means every group is full (L = g), as when m is a multiple of
    g. pp 4, vpp 3, message 0.1 s, groups of 6, stage 0's forward chunks 0.1, 0.3, 0.5 s and the last stage's
    backward chunks 0.2, 0.1, 0.3 s: fill (p − 1)·0.1 = 0.3 plus max(0, 0.4 − 2·0.1) + max(0, 0.4 − 2·0.3) = 0.2;
    drain 0.3 plus max(0, 0.4 − (6 − 4)·0.1) + max(0, 0.4 − 2·0.3) = 0.2; 1.0 s in all — the same as naming a last
    group of 6, not a last group of p = 4 (which leaves the drain no slack: 0.3 + 0.8)."""
    F, B = [0.1, 0.3, 0.5], [0.2, 0.1, 0.3]
    assert P.fill_drain_latency_s(4, 3, 0.1, 6, fwd_chunk_s=F, bwd_chunk_s=B) == pytest.approx(1.0, rel=1e-12)
    assert P.fill_drain_latency_s(4, 3, 0.1, 6, 6, F, B) == pytest.approx(1.0, rel=1e-12)


def test_profile_usage_prints_a_tiers_latency_in_microseconds():
    """A tier's α is printed in microseconds, seconds × 10⁶ to one decimal: 1 s (an extreme profile, where a wrong
    factor shows in the printed digits) is "alpha 1000000.0 us", 5 µs is "alpha 5.0 us"."""
    cal = calibration_for(system("dgx-h100").device.name)
    one_s = dataclasses.replace(cal, tiers={"scale_up": TierCalibration(bw_efficiency=0.8, alpha_s=1.0)})
    assert "scale_up: busbw eff 0.80, alpha 1000000.0 us" in profile_usage(one_s, "bf16", {"scale_up"})
    five = dataclasses.replace(cal, tiers={"scale_up": TierCalibration(bw_efficiency=0.8, alpha_s=5e-6)})
    assert "scale_up: busbw eff 0.80, alpha 5.0 us" in profile_usage(five, "bf16", {"scale_up"})
