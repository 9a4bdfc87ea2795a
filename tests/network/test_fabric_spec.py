"""FabricSpec refuses what cannot be built and accepts the smallest fabric that can."""
from __future__ import annotations

import pytest

from narrowpath.errors import SpecError
from narrowpath.network.fabric import TOPOLOGIES, FabricSpec

BASE = dict(num_gpus=16, gpus_per_node=8, scale_up_domain=8, scale_up_bw_bytes_per_s=450e9, nic_bw_bytes_per_s=50e9)


def test_a_single_gpu_fabric_is_valid():
    assert FabricSpec(**{**BASE, "num_gpus": 1, "gpus_per_node": 1, "scale_up_domain": 1}).num_gpus == 1


@pytest.mark.parametrize("field, value", [("num_gpus", 0), ("gpus_per_node", 0), ("switch_radix", 2),
                                          ("switch_radix", 3)])
def test_each_size_below_its_minimum_is_refused_alone(field, value):
    """Every other field valid: a zero count or a switch of fewer than 4 ports (a fat tree needs 2 down + 2 up)
    is refused by itself."""
    with pytest.raises(SpecError, match="fabric"):
        FabricSpec(**{**BASE, field: value})


def test_an_unknown_topology_lists_the_known_ones():
    with pytest.raises(SpecError) as exc:
        FabricSpec(**BASE, topology="torus")
    known = str(exc.value).split("known: ")[1]
    assert known.split(", ") == list(TOPOLOGIES)
