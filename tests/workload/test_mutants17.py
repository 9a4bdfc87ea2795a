"""Workload values checked by hand where mutation testing (benchmarks/mutation.py, seed 17) found them loose: the
chunk layouts whose end stage holds exactly one layer, and the experts zero routed token copies touch."""
from __future__ import annotations

from narrowpath.workload.serving import expected_active_experts
from narrowpath.workload.split import end_chunk_layouts


def test_chunk_layouts_keep_an_end_stage_holding_exactly_one_layer():
    """4 layers on pp 3 × vpp 1 (three chunks, one per stage): a in the first, c in the middle, b = 4 − a − c ≤ c in
    the last, both end stages holding a layer (a, b >= 1). c = 1 leaves 3 for a + b (b ≤ 1 forces a = 2 > c);
    c = 2 leaves 2: (0, 2) and (2, 0) leave a stage empty, (1, 1) holds one layer at each end; c = 3 leaves 1 and
    c = 4 none, so an end is empty. The one layout is (1, 2, 1), whose end stages hold exactly one layer each.

    3 layers on pp 2 × vpp 2 (four chunks; stage 0 holds chunks 0 and 2, stage 1 chunks 1 and 3): c = 1 is the
    only width (3 // 2), leaving 1 for a + b. (a, b) = (0, 1): stage 0 holds 0 + 1 = 1 layer, stage 1 holds
    1 + 1 = 2; (1, 0): stage 0 holds 2, stage 1 holds 1. Both keep every stage holding a layer, one of them a
    single layer."""
    assert end_chunk_layouts(4, 3, 1) == [(1, 2, 1)]
    assert end_chunk_layouts(3, 2, 2) == [(0, 1, 1, 1), (1, 1, 1, 0)]


def test_zero_token_copies_touch_no_expert_even_with_one_expert():
    """experts_here · (1 − (1 − 1/E)^copies) with copies = 0 is experts_here · (1 − 1) = 0 for every E: with a
    single expert (E = 1, (1 − 1)^0 = 1) no token copy chose it either; with one copy it is chosen for sure
    ((1 − 1)^1 = 0: all of experts_here), and with 8 experts one copy chooses 1/8 of them."""
    assert expected_active_experts(1.0, 1, 0.0) == 0.0
    assert expected_active_experts(1.0, 1, 1.0) == 1.0
    assert abs(expected_active_experts(8.0, 8, 1.0) - 1.0) < 1e-12
