"""Power-capped clock checked by hand where mutation testing (benchmarks/mutation.py, seed 18) found it loose: a cap
within a watt of the board's idle power."""
from __future__ import annotations

import math

from narrowpath.cost.power import clock_fraction


def test_a_cap_within_a_watt_of_idle_leaves_almost_no_clock():
    """P − P_idle ∝ f² (cost.power): a 700 W board idling at 100 W has 600 W of dynamic power at its rated clock.
    Capped at 100.25 W it keeps 0.25 W of it: f = √(0.25/600) = 0.0204124 of the clock (not √(1/600) = 0.0408 — the
    0.25 W is not rounded up to a watt). Capped at its idle power it keeps none: f = √(1e-9/600) ≈ 1.3e-6 (the 1e-9 W
    floor only keeps the root defined), far below 1 % of the clock."""
    assert math.isclose(clock_fraction(700.0, 100.0, 100.25), 0.020412414523193152, rel_tol=1e-12)
    assert clock_fraction(700.0, 100.0, 100.0) < 1e-5
    # a cap of 600 W: 1 − √(500/600) of the clock lost, the module docstring's 9 % at 700 → 600 W with 120 W idle
    assert math.isclose(clock_fraction(700.0, 120.0, 600.0), math.sqrt(480 / 580), rel_tol=1e-12)
