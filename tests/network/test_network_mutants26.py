"""Network values the seed-26 mutation sample (benchmarks/mutation.py) found unguarded: the pod-down trunk a flow
between two pods of a three-level fat tree enters — pinned by the documented link order."""
from __future__ import annotations

import numpy as np

from narrowpath.network.contention import max_min_rates
from narrowpath.network.fabric import FatTree


def test_a_flow_between_pods_leaves_the_core_on_its_destination_pods_down_trunk():
    """12 endpoints, 2 per leaf (6 leaves), on radix-4 switches: 6 leaves > 4, so a three-level tree of pods of
    radix/2 = 2 leaves (3 pods). Links in order (FatTree): endpoint up 0–11, endpoint down 12–23, leaf up 24–29,
    leaf down 30–35, pod up 36–38, pod down 39–41, padding 42. Endpoint 0 (leaf 0, pod 0) to endpoint 11 (leaf 5,
    pod 2) crosses 0 up, 12 + 11 = 23 down, leaf 0 up 24, leaf 5 down 30 + 5 = 35, pod 0 up 36 and pod 2 down
    39 + 2 = 41 —
    six distinct links. Within a pod (0 → 3, leaf 1) the pod trunks are padding; within a leaf (0 → 1) the leaf
    trunks too."""
    tree = FatTree.uniform(num_endpoints=12, endpoint_bw=1.0, endpoints_per_leaf=2, radix=4)
    assert (tree.num_leaves, tree.num_pods, tree.pad_link) == (6, 3, 42)
    paths = tree.paths(np.array([0, 0, 0]), np.array([11, 3, 1]))
    assert paths.tolist() == [[0, 23, 24, 35, 36, 41], [0, 15, 24, 31, 42, 42], [0, 13, 42, 42, 42, 42]]


def test_two_flows_into_one_pod_share_its_down_trunk_and_nothing_else_of_the_core():
    """Same tree, endpoint bandwidth 1 B/s: the pod trunks carry 2 leaves × 2 endpoints = 4 B/s. Flows 0 → 8
    (pod 0 → pod 2) and 4 → 10 (pod 1 → pod 2) meet only on pod 2's down trunk (4 B/s) and each is held by its own 1 B/s
    endpoint links: both get 1 B/s. A pod-down index P links too low (2E + 2L − P + pod = 35) would land on leaf 5's
    down trunk, which flow 4 → 10 already crosses: its row would list one 2 B/s link twice."""
    tree = FatTree.uniform(num_endpoints=12, endpoint_bw=1.0, endpoints_per_leaf=2, radix=4)
    paths = tree.paths(np.array([0, 4]), np.array([8, 10]))
    assert paths[:, 5].tolist() == [41, 41]
    assert all(len(set(row)) == 6 for row in paths.tolist())
    assert max_min_rates(paths, tree.capacities()).tolist() == [1.0, 1.0]
