"""Contention input checked where mutation testing (benchmarks/mutation.py, seed 17) found it untested: a link
index outside the capacity vector."""
from __future__ import annotations

import numpy as np
import pytest

from narrowpath.errors import SpecError
from narrowpath.network.contention import max_min_rates


@pytest.mark.parametrize("bad", [2, -1])
def test_a_link_index_outside_the_capacities_is_a_spec_error_naming_contention_paths(bad):
    """Two links (capacities 10 and 4): a flow over link 2 (one past the end) or link −1 names no link. The error
    names its field, contention.paths, first, and the valid range [0, 2)."""
    with pytest.raises(SpecError) as err:
        max_min_rates(np.array([[0], [bad]]), np.array([10.0, 4.0]))
    assert err.value.field == "contention.paths"
    assert str(err.value) == "contention.paths: link index out of range [0, 2)"
