"""Fabric values the seed-23 mutation sample (benchmarks/mutation.py) found unguarded in network/: a fat tree given
only its leaf oversubscription — pinned by a hand value."""
from __future__ import annotations

import numpy as np

from narrowpath.network.fabric import FatTree


def test_a_fat_tree_given_only_the_leaf_ratio_keeps_a_non_blocking_spine():
    """FatTree.build's `oversubscription` is (leaf, spine, ...); a 1-tuple gives the leaf ratio alone and the spine
    stays non-blocking (1.0). Radix 4, 10 endpoints of 100 B/s, 2 per leaf: 5 leaves > radix, so a 3-level tree
    whose pods hold radix / 2 = 2 leaves each (pods [0, 0, 1, 1, 2]). Each leaf's 200 B/s of downlinks over the 2:1
    leaf ratio gives 100 B/s of uplink; the pods' core trunks are the sums of their leaves' uplinks over 1:
    200, 200, 100 B/s."""
    tree = FatTree.build(leaf_of=np.arange(10) // 2, endpoint_bw=100.0, radix=4, oversubscription=(2.0,))
    assert tree.levels == 3
    assert tree.leaf_up_bw.tolist() == [100.0] * 5
    assert tree.pod_of_leaf.tolist() == [0, 0, 1, 1, 2]
    assert tree.pod_up_bw.tolist() == [200.0, 200.0, 100.0]
