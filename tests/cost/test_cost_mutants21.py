"""A collective latency the seed-21 mutation sample (benchmarks/mutation.py) found unguarded in cost/: the LL
protocol's network hop, pinned by a hand calculation."""
from __future__ import annotations

import pytest

from narrowpath.cost.collectives import ring
from narrowpath.network.paths import PathModel


def test_an_ll_ring_across_nodes_pays_nccls_ll_network_hop():
    """An all-gather of 8 B over 4 domains of one rank each: 3 ring steps, all of them inter-node. NCCL's
    tuning.cc hop latencies on the network are 2.7 / 4.0 / 9.6 µs for LL / LL128 / Simple, so with a Simple hop of
    α_out = 9.6 µs the LL latency is its base 6.6 µs + 3 · 2.7 µs = 14.7 µs; LL128 would take
    14.0 + 3 · 4.0 = 26.0 µs and Simple 8.4 + 3 · 9.6 = 37.2 µs, so an 8-byte message goes LL."""
    pm = PathModel(size=4, ranks_per_domain=1, domains=4, up_bw=100e9, nic_bw=50e9, alpha_up_s=1e-6,
                   alpha_out_s=9.6e-6)
    c = ring("all_gather", 8.0, pm)
    assert c.protocol == "LL"
    assert c.latency_s == pytest.approx(14.7e-6, rel=1e-12)
