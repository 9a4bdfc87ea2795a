"""Network values the seed-25 mutation sample (benchmarks/mutation.py) found unguarded: a weighted bundle's share
of the capacity it is left after another flow freezes — pinned by a hand calculation of progressive filling."""
from __future__ import annotations

import numpy as np
import pytest

from narrowpath.network.contention import max_min_rates


def test_a_bundle_keeps_its_weight_in_the_rounds_after_another_flow_freezes():
    """Links: 0 of 2 B/s, 1 of 10 B/s, 2 infinite (the padding). Flow A (one flow) crosses links 0 and 1; flow B
    is a bundle of 3 identical flows on link 1 only. Round 1: loads 1 and 1 + 3 = 4, fair shares 2/1 = 2 and
    10/4 = 2.5; every flow rises by 2, link 0 saturates and A freezes at 2, leaving link 1 with 10 − 4·2 = 2.
    Round 2: B's 3 flows share those 2 B/s, 2/3 each: B ends at 2 + 2/3 = 8/3 per flow, and link 1 carries
    2 + 3·8/3 = 10, exactly its capacity. A bundle counted as one flow in round 2 would get all 2 B/s per flow
    (B at 4, link 1 at 14: over its capacity)."""
    inf = np.inf
    paths = np.array([[0, 1], [1, 2]])
    cap = np.array([2.0, 10.0, inf])
    rates = max_min_rates(paths, cap, weights=np.array([1.0, 3.0]))
    assert rates == pytest.approx([2.0, 8.0 / 3.0], rel=1e-12)
    assert rates[0] + 3 * rates[1] == pytest.approx(10.0, rel=1e-12)  # link 1 full, not over
