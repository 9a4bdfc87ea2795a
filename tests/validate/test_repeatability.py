"""The corpus's error floor by hand (validate.repeatability)."""
from __future__ import annotations

from dataclasses import dataclass

import pytest

from narrowpath.validate.repeatability import best_max_abs_error, best_mean_abs_error, repeatability


def test_two_measurements_of_one_configuration_by_hand():
    """29.26 s and 51.27 s (Qwen3-30B-A3B on 16 H100 in two NeMo containers). Mean: the 1/m-weighted median is the
    faster time (weight 1/29.26 > half of the total), errors 0 and 22.01/51.27 → 21.47 %; any t between them is
    worse because the slope 1/29.26 of the first error exceeds 1/51.27. Worst: t = 2·29.26·51.27/80.53 = 37.26 s,
    both errors (51.27 − 29.26)/80.53 = 27.33 %."""
    assert best_mean_abs_error([51.27, 29.26]) == pytest.approx(22.01 / 51.27 / 2)
    assert best_max_abs_error([29.26, 51.27]) == pytest.approx(22.01 / 80.53)
    t = 2 * 29.26 * 51.27 / 80.53
    assert abs(t - 29.26) / 29.26 == pytest.approx(abs(t - 51.27) / 51.27) == pytest.approx(22.01 / 80.53)
    assert best_mean_abs_error([7.0]) == best_max_abs_error([7.0]) == 0.0
    assert best_mean_abs_error([5.0, 5.0, 5.0]) == 0.0


def test_three_measurements_the_weighted_median_beats_every_other_choice():
    m = [10.0, 11.0, 14.0]
    best = best_mean_abs_error(m)
    grid = [9.0 + 0.01 * k for k in range(600)]
    assert best == pytest.approx(min(sum(abs(t - x) / x for x in m) / 3 for t in grid), abs=1e-3)
    assert best <= min(sum(abs(t - x) / x for x in m) / 3 for t in grid) + 1e-12


@dataclass
class R:
    id: str
    config_key: str
    measured_step_time_s: float
    predicted_step_time_s: float = 1.0


def test_groups_floor_and_spreads():
    """Two groups (2 and 3 cases) and a lone case: the floor averages over all six priced cases."""
    rs = [R("a1", "A", 29.26), R("a2", "A", 51.27), R("b1", "B", 10.0), R("b2", "B", 11.0), R("b3", "B", 14.0),
          R("c", "C", 3.0)]
    q = repeatability(rs)
    assert (q.groups, q.cases, q.total) == (2, 5, 6)
    assert q.floor_mean_abs_error == pytest.approx((2 * best_mean_abs_error([29.26, 51.27])
                                                    + 3 * best_mean_abs_error([10.0, 11.0, 14.0])) / 6)
    assert q.floor_max_abs_error == pytest.approx(22.01 / 80.53)
    assert q.spreads[0] == ("a1", pytest.approx(51.27 / 29.26 - 1)) and q.max_spread == pytest.approx(51.27 / 29.26 - 1)
    assert q.median_spread == pytest.approx((51.27 / 29.26 - 1 + 0.4) / 2)
    assert set(q.to_json()) >= {"groups", "cases", "floor_mean_abs_error", "floor_max_abs_error", "max_spread"}
