"""Plateau detection finds the steps of a staircase and their edges."""
from __future__ import annotations

import numpy as np
import pytest

from narrowpath.measure.segment import edge_x, find_plateaus


def _staircase(noise: float):
    rng = np.random.default_rng(3)
    x = [2 ** (k / 3) * 65536 for k in range(40)]
    y = [130e9 if v < 2e6 else 30e9 if v < 1e8 else 16e9 for v in x]
    return x, [v * (1 + noise * rng.standard_normal()) for v in y]


@pytest.mark.parametrize("noise", [0.0, 0.04])
def test_three_levels_and_their_edges(noise):
    x, y = _staircase(noise)
    plats = find_plateaus(y)
    assert len(plats) == 3
    assert [p.level_y for p in plats] == pytest.approx([130e9, 30e9, 16e9], rel=0.06)
    edges = [edge_x(x, y, a, b) for a, b in zip(plats, plats[1:])]
    assert 1.0e6 < edges[0] < 4e6 and 0.5e8 < edges[1] < 2e8


def test_transition_samples_are_not_a_level():
    """A short slope between two steps is dropped rather than reported as a level."""
    y = [100.0] * 6 + [70.0, 45.0] + [30.0] * 6
    assert [round(p.level_y) for p in find_plateaus(y)] == [100, 30]


def test_flat_curve_is_one_plateau():
    assert len(find_plateaus([5.0] * 10)) == 1


def test_rejects_non_positive():
    with pytest.raises(ValueError):
        find_plateaus([1.0, 0.0, 2.0])


def test_monotone_merges_a_noise_dip():
    """Bandwidth never rises farther out: a dip (a busy neighbour) joins the step before it."""
    y = [100.0] * 5 + [30.0] * 5 + [16.0] * 3 + [11.0] * 3 + [16.0] * 4
    plats = find_plateaus(y, monotone="decreasing")
    assert [round(p.level_y) for p in plats] == [100, 30, 16]
