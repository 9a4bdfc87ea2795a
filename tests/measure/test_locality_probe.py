"""The locality probe times a recurrent step for real; the model's cliffs sit at the given level capacities."""
from __future__ import annotations

import math

import pytest

from narrowpath.measure.locality_probe import predicted_cliffs, predicted_s_per_flop, probe_locality

LEVELS = [{"name": "L2", "capacity_bytes": 2e6, "bandwidth_bytes_per_s": 100e9},
          {"name": "L3", "capacity_bytes": 1e8, "bandwidth_bytes_per_s": 30e9},
          {"name": "DRAM", "capacity_bytes": 1e10, "bandwidth_bytes_per_s": 15e9}]


def test_real_sweep_positive_and_compared():
    r = probe_locality(quick=True, levels=LEVELS, max_weight_bytes=8 * 2**20, repeats=2, progress=False)
    assert r["samples"] and r["backend"]
    for s in r["samples"]:
        assert s["weight_bytes"] == 4 * s["hidden"] ** 2
        assert math.isfinite(s["s_per_flop"]) and s["s_per_flop"] > 0
    assert [c["level"] for c in r["comparison"]] == ["L2", "L3"]


def test_predicted_cliff_positions_and_heights():
    """H* = sqrt(capacity/4); the time per FLOP after the L2 cliff is (2/B)/bw(L3)."""
    samples = [{"s_per_flop": 1e-12}]
    cliffs = predicted_cliffs(samples, LEVELS, batch=1)
    assert cliffs[0]["hidden"] == pytest.approx(math.sqrt(2e6 / 4))
    assert cliffs[0]["s_per_flop_after"] == pytest.approx(2 / 30e9)
    assert cliffs[0]["jump"] == pytest.approx(100 / 30)


def test_prediction_is_a_staircase():
    t = [predicted_s_per_flop(x, LEVELS, 1, 0.0) for x in (1e6, 5e7, 5e9)]
    assert t == pytest.approx([2 / 100e9, 2 / 30e9, 2 / 15e9])
