"""Network values the seed-19 mutation sample (benchmarks/mutation.py) found unguarded — max-min fairness between
links tied up to rounding, the span of an nccl-tests style contiguous group, and Megatron-Core's expert coordinates
— each pinned by a hand calculation."""
from __future__ import annotations

import numpy as np

from narrowpath.catalog import system
from narrowpath.network.contention import max_min_rates
from narrowpath.network.placement import GroupSpan, contiguous_span, expert_coordinates
from narrowpath.spec.plan import Plan


def test_links_tied_up_to_rounding_saturate_in_one_round_and_give_equal_rates():
    """Two flows, each alone on its own link; the links' capacities are 0.3 and 0.1 + 0.2 (= 0.30000000000000004,
    the same capacity computed another way). Progressive filling raises both flows by the smaller fair share, 0.3,
    and the tolerance of the saturation test (1e-9 relative) counts the other link as saturated in that same round:
    both flows end at exactly 0.3 — equal links give equal rates, whatever rounding their capacities carry. A link
    with a clearly larger capacity (0.5) is not frozen with them: its flow goes on to 0.5."""
    cap = np.array([0.3, 0.1 + 0.2])
    assert cap[1] != cap[0] and abs(cap[1] - cap[0]) < 1e-9 * cap[0]
    rates = max_min_rates(np.array([[0], [1]]), cap)
    assert rates.tolist() == [0.3, 0.3]
    rates = max_min_rates(np.array([[0], [1], [2]]), np.array([0.3, 0.1 + 0.2, 0.5]))
    assert rates.tolist() == [0.3, 0.3, 0.5]


def test_a_contiguous_group_spans_whole_nodes_with_stride_one():
    """Ranks 0..11 on DGX H100s (8 GPUs per node and per NVLink domain): consecutive ranks, so the stride between
    members is 1; node 0 holds ranks 0–7 and node 1 ranks 8–11, so the fewest members in one domain / node is 4
    (the rails a ring can use across the two nodes), over ⌈12/8⌉ = 2 domains and 2 nodes, and the most 8 (the
    domain whose ring a hierarchical collective waits for). Four ranks fit one node: 4 per domain, 1 domain."""
    h100 = system("dgx-h100")
    assert contiguous_span(12, h100) == GroupSpan(axis="custom", size=12, stride=1, ranks_per_domain=4, domains=2,
                                                  ranks_per_node=4, nodes=2, busiest_domain=8)
    four = contiguous_span(4, h100)
    assert (four.size, four.stride, four.ranks_per_domain, four.domains, four.nodes) == (4, 1, 4, 1, 1)


def test_expert_coordinates_by_hand_keep_the_ranks_integer_type():
    """tp 2 × dp 2 × pp 2 (placement tp, cp, dp, pp), ep 2, etp 1 (given: etp 0 would mean etp = tp): a rank r has tp = r mod 2, dp = ⌊r/2⌋
    mod 2, pp = ⌊r/4⌋; its index inside its pipeline stage is tp + 2·dp = r mod 4, split as etp (size 1, always 0),
    then ep = index mod 2, then edp = ⌊index / 2⌋. The coordinates are integer arrays of the ranks' own type
    (int32 here), as every other coordinate: group keys and fancy indexing are built from them."""
    r = np.arange(8, dtype=np.int32)
    coords = {"tp": r % 2, "cp": np.zeros_like(r), "dp": (r // 2) % 2, "pp": r // 4}
    out = expert_coordinates(Plan(tp=2, dp=2, pp=2, ep=2, etp=1, gbs=8), coords)
    assert out["etp"].tolist() == [0] * 8
    assert out["ep"].tolist() == [0, 1, 0, 1, 0, 1, 0, 1]
    assert out["edp"].tolist() == [0, 0, 1, 1, 0, 0, 1, 1]
    assert all(out[k].dtype == np.int32 for k in ("etp", "ep", "edp"))
