"""The cluster energy level charges a job its share of the scale-out switches — the ports its GPUs use — so a
two-node job no longer pays a whole rail fabric (8 leaves and 4 spines: 15.5 kW of switches beside 14.4 kW of
nodes, twice the 8-GPU job's J/token)."""
from __future__ import annotations

import pytest

from narrowpath.analysis.energy import switch_count
from narrowpath.catalog import system


@pytest.fixture(scope="module")
def dgx():
    return system("dgx-h100")  # 8 GPUs a node, rail-optimised scale-out, 64-port switches, no oversubscription


def test_one_scale_up_domain_uses_no_switch(dgx):
    assert switch_count(dgx, 8) == 0


@pytest.mark.parametrize("gpus,expected", [
    # 256 GPUs fill 8 leaves of 32 down ports; 8 × 32 uplinks / 64 ports = 4 spines (the whole fabric, as before)
    (256, 8 + 4),
    # 16 GPUs: 16 of 32 down ports = half a leaf, its 16 uplinks = a quarter of a spine
    (16, 0.5 + 0.25),
    (1024, 32 + 16),
    # 16,384 GPUs: 512 leaves; 512 × 32 uplinks over pod spines of 32 up ports = 512; 512 × 32 / 64 = 256 core
    (16384, 512 + 512 + 256),
])
def test_switches_worth_of_ports(dgx, gpus, expected):
    assert switch_count(dgx, gpus) == pytest.approx(expected, rel=1e-12)


def test_switch_share_per_gpu_does_not_jump_at_the_second_node(dgx):
    per_gpu = [switch_count(dgx, g) / g for g in (16, 32, 64, 128, 256, 512)]
    assert per_gpu == pytest.approx([12 / 256] * len(per_gpu), rel=1e-12)
