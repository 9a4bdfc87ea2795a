"""The search's lower bound of a structural row (Exact.lower_rows: its dominant variants with an unlimited overlap
window) stays below the step time of every variant of the row, also under interleaving, where the gradient sync is
priced chunk by chunk through the cool-down (schedule.chunks.chunked_sync_exposed_s) and the critical stage, whose
chunks carry the sync's bytes, can differ between variants."""
from __future__ import annotations

import numpy as np
import pytest

from narrowpath.search.bulk import Bulk
from narrowpath.search.each import scenario_of
from narrowpath.search.exact import Exact
from narrowpath.search.parts import Parts
from narrowpath.search.table import build_table
from tests.search.test_bulk import SCENARIOS, _space


@pytest.mark.parametrize("name", ["llama3-70b-h100-256", "gpt3-175b-a100-1024", "deepseek-v3-megatron-bridge"])
def test_the_lower_bound_is_below_every_variant_of_an_interleaved_row(name):
    scn = SCENARIOS[name]()
    table = build_table(_space(scn))
    inter = np.flatnonzero(table.cols["vpp"][:table.num_structural] > 1)
    assert inter.size
    rng = np.random.default_rng(31)
    rows = np.sort(rng.choice(inter, size=min(30, inter.size), replace=False))
    bulk = Bulk(table, Parts(scenario_of(scn, _space(scn), _space(scn).base), None))
    sp = bulk.structural(rows)
    ex = Exact(bulk)
    at = np.arange(rows.size)
    idx, times = ex.price_rows(sp, at)
    low = ex.lower_rows(sp, at)
    owner = np.searchsorted(rows, np.searchsorted(table.starts, idx, side="right") - 1)
    for pos in range(rows.size):
        assert low[pos] <= times[owner == pos].min() * (1 + 1e-12), table.plan(int(table.starts[rows[pos]]))
