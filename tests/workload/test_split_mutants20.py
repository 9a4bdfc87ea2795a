"""The pipeline rebalance's end-stage extras and the DeepSeek-V3 style chunk layouts of a three-chunk pipeline,
checked by hand where mutation testing (benchmarks/mutation.py, seed 20) found them loose."""
from __future__ import annotations

from narrowpath.workload.split import balanced_end_layers, end_chunk_layouts


def test_the_last_stage_keeps_what_it_takes_beyond_its_own_layers():
    """12 layers on pp 4 (vpp 1) laid out 4/4/3/1, stage times 4.5, 4, 3, 3 s per micro-batch. The middle stages
    cost 4/4 = 3/3 = 1 s per layer; the first stage takes 4.5 − 4 · 1 = 0.5 s beyond its layers (the embedding),
    the last 3 − 1 · 1 = 2 s (the output layer and loss: its own 1 layer, not the second stage's 4). Megatron-Core's
    splits with (first, last) layers and their times (layers + 0.5 first, + 2 last): even (0, 0) 3/3/3/3 → 5;
    (1, 1) 1/5/5/1 → 5; (1, 3) → 5; (2, 2) 2/4/4/2 → 2.5, 4, 4, 4 → 4; (3, 1) 3/4/4/1 → 4; (4, 2) 4/3/3/2 → 4.5;
    nothing reaches below 4, and (2, 2) is the first tried with 4 (first ascending), under the current slowest
    4.5 · 0.999. With the second stage's 4 layers taken for the last's, its extra would be 3 − 4 = −1 and (2, 4)
    (2/3/3/4 → 2.5, 3, 3, 3) would look best."""
    assert balanced_end_layers(12, 4, 1, [4.5, 4.0, 3.0, 3.0], [4, 4, 3, 1]) == (2, 2)


def test_three_chunks_may_give_the_middle_one_more_than_half_the_layers():
    """5 layers in pp·vpp = 3 chunks (pp 3, vpp 1), a in the first, c in the middle, b ≤ c in the last, a ≤ c,
    every stage at least one layer (a, b ≥ 1): c = 1 leaves b = 4 − a > 1; c = 2: (1, 2, 2), (2, 2, 1); c = 3:
    a + b = 2, so (1, 3, 1); c ≥ 4 leaves a + b ≤ 1. The middle chunk may hold up to all the layers less the
    pp·vpp − 2 = 1 others' share (c runs to layers // 1), so (1, 3, 1) is offered."""
    assert end_chunk_layouts(5, 3, 1) == [(1, 2, 2), (2, 2, 1), (1, 3, 1)]
