"""Fabrics generated from parameters: leaves, pods and levels for any size, rails, oversubscription."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from narrowpath.catalog import system
from narrowpath.errors import SpecError
from narrowpath.network.fabric import FatTree, fabric_for


def test_16k_gpu_rail_fabric_is_generated_not_listed():
    """16,384 H100: 8 rails × 64 scalable units of 32 nodes; three levels; a few arrays only."""
    fab = fabric_for(system("dgx-h100"), 16384)
    tree = fab.fat_tree()
    assert fab.num_nodes == 2048 and tree.num_endpoints == 16384
    assert tree.num_leaves == 8 * 64 and tree.levels == 3
    assert tree.capacities().size == 2 * 16384 + 2 * tree.num_leaves + 2 * tree.num_pods + 1


def test_rail_optimised_leaf_holds_one_rail_of_a_unit():
    fab = fabric_for(system("dgx-h100"), 1024)
    leaf = fab.leaf_of_gpu()
    assert leaf[0] == leaf[8] == leaf[8 * 31]  # GPU 0 of nodes 0..31: same rail-0 leaf
    assert leaf[0] != leaf[1]  # GPU 1 is on rail 1
    assert leaf[0] != leaf[8 * 32]  # node 32 starts the next unit


def test_fat_tree_fills_leaves_with_consecutive_gpus():
    fab = dataclasses.replace(fabric_for(system("dgx-h100"), 256), topology="fat_tree")
    leaf = fab.leaf_of_gpu()
    assert list(np.bincount(leaf)) == [32] * 8


def test_oversubscription_trims_uplinks_per_level():
    tree = FatTree.uniform(num_endpoints=4096, endpoint_bw=50e9, endpoints_per_leaf=32, radix=64,
                           oversubscription=(2.0, 4.0))
    assert tree.levels == 3
    assert tree.leaf_up_bw[0] == pytest.approx(32 * 50e9 / 2)
    assert tree.pod_up_bw[0] == pytest.approx(32 * 32 * 50e9 / 2 / 4)


def test_paths_go_up_only_as_far_as_needed():
    tree = FatTree.uniform(num_endpoints=4096, endpoint_bw=1.0, endpoints_per_leaf=32, radix=64)
    p = tree.paths(np.array([0, 0, 0]), np.array([1, 40, 2000]))
    real = (p != tree.pad_link).sum(axis=1)
    assert list(real) == [2, 4, 6]


def test_bad_fabric_parameters_raise():
    fab = fabric_for(system("dgx-h100"), 64)
    with pytest.raises(SpecError):
        dataclasses.replace(fab, topology="torus")
    with pytest.raises(SpecError):
        dataclasses.replace(fab, oversubscription=(0.5, 1.0))
