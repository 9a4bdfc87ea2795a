"""The generated fat tree's link set for a two-level fabric, checked by hand where mutation testing
(benchmarks/mutation.py, seed 20) found it loose."""
from __future__ import annotations

import numpy as np

from narrowpath.network.fabric import FatTree


def test_a_two_level_tree_has_one_pod_and_its_link_list_one_pod_trunk_each_way():
    """4 endpoints of 100 B/s, 2 per leaf, radix 8: 2 leaves ≤ 8, so a 2-level tree — one pod (all leaves' pod 0),
    with no core above it (pod trunk capacity 0). Links in order: 4 endpoint up, 4 endpoint down, 2 leaf up
    trunks, 2 leaf down trunks (each leaf's 2 × 100 = 200 B/s at oversubscription 1), 1 pod up, 1 pod down, the ∞
    padding link: 15 links, the padding link's index 2·4 + 2·2 + 2·1 = 14."""
    tree = FatTree.build(leaf_of=np.array([0, 0, 1, 1]), endpoint_bw=100.0, radix=8)
    assert tree.levels == 2
    assert (tree.num_endpoints, tree.num_leaves, tree.num_pods) == (4, 2, 1)
    assert tree.pad_link == 14
    assert tree.capacities().tolist() == [100.0] * 8 + [200.0] * 4 + [0.0, 0.0, float("inf")]
