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


def _cliff(wb: float) -> dict:
    return {"weight_bytes": wb, "hidden": (wb / 4) ** 0.5, "jump": 2.0}


def _level(name: str, wb: float) -> dict:
    return {"level": name, "weight_bytes": wb, "hidden": (wb / 4) ** 0.5, "jump": 3.0}


def test_one_measured_cliff_is_given_to_one_level_only():
    """One cliff at 3 MB between L2 (1 MiB) and L3 (32 MiB): nearest-per-level gave it to both; it is L2's only."""
    from narrowpath.measure.locality_probe import compare_cliffs
    rows = compare_cliffs([_cliff(3e6)], [_level("L2", 2**20), _level("L3", 32 * 2**20)])
    assert [r["measured_weight_bytes"] for r in rows] == [3e6, None]


def test_cliffs_match_in_order_and_within_a_factor():
    from narrowpath.measure.locality_probe import MAX_MATCH_RATIO, compare_cliffs, match_cliffs
    assert match_cliffs([1.2e6, 40e6], [1e6, 32e6]) == [0, 1]
    assert match_cliffs([1.5e6, 2e6, 30e6], [1e6, 32e6]) == [0, 2]  # an extra measured cliff is left over
    assert match_cliffs([20e6], [1e6, 32e6]) == [None, 0]
    assert match_cliffs([1e6 * MAX_MATCH_RATIO * 1.1], [1e6]) == [None]
    rows = compare_cliffs([_cliff(40e6), _cliff(1.2e6)], [_level("L3", 32e6), _level("L2", 1e6)])  # any order
    assert [(r["level"], r["measured_weight_bytes"]) for r in rows] == [("L3", 40e6), ("L2", 1.2e6)]
    used = [r["measured_weight_bytes"] for r in rows if r["measured_weight_bytes"]]
    assert len(used) == len(set(used))


def test_console_lists_measured_cliffs_left_unmatched():
    """A measured cliff at 2.0 MiB (x2.57) more than 4x from the only prediction (L3 at 14.8 MiB) used to appear only
    in the JSON: the console read 'no cliff measured' and nothing else. It is listed as a measured cliff with no
    predicted one."""
    from narrowpath.measure.locality_probe import compare_cliffs
    from narrowpath.report.measure_tables import format_locality
    mib = 2**20
    measured = [{"weight_bytes": 2.0 * mib, "hidden": 724.0, "jump": 2.57},
                {"weight_bytes": 15.0 * mib, "hidden": 1982.0, "jump": 3.1}]
    predicted = [{"level": "L3", "weight_bytes": 14.8 * mib, "hidden": 1972.0, "jump": 3.37}]
    for cliffs, matched in ((measured[:1], False), (measured, True)):
        text = format_locality({"device": "x", "batch": 1, "samples": [], "measured_cliffs": cliffs,
                                "comparison": compare_cliffs(cliffs, predicted)})
        assert "measured 2.0 MiB (H~724, x2.57)   no predicted cliff within 4x" in text, text
        assert ("no cliff measured" in text) != matched and text.count("no predicted cliff") == 1
