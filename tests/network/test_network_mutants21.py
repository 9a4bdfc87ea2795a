"""A fabric layout the seed-21 mutation sample (benchmarks/mutation.py) found unguarded in network/: GPUs per
leaf of a plain fat tree whose NICs are shared, by hand."""
from __future__ import annotations

from narrowpath.network.fabric import FabricSpec


def test_a_fat_tree_leaf_serves_twice_the_gpus_when_two_share_a_nic():
    """Radix-8 leaves give 4 ports down; with one NIC per two GPUs (nics_per_gpu 0.5) those 4 NICs serve 8 GPUs,
    so 16 GPUs fill leaves 0 and 1 with 8 each; with one NIC per GPU 4 GPUs a leaf (4 leaves), and with two NICs
    per GPU 2 GPUs a leaf."""
    def leaves(nics):
        return FabricSpec(num_gpus=16, gpus_per_node=8, scale_up_domain=8, scale_up_bw_bytes_per_s=450e9,
                          nics_per_gpu=nics, nic_bw_bytes_per_s=50e9, topology="fat_tree",
                          switch_radix=8).leaf_of_gpu().tolist()

    assert leaves(0.5) == [0] * 8 + [1] * 8
    assert leaves(1.0) == [g // 4 for g in range(16)]
    assert leaves(2.0) == [g // 2 for g in range(16)]
