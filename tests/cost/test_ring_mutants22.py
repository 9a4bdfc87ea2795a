"""Ring collective latencies the seed-22 mutation sample (benchmarks/mutation.py) found unguarded in cost/: a
broadcast's n − 1 hops and NCCL's LL bandwidth on two nodes — each pinned by a hand calculation from NCCL's
tuning.cc constants."""
from __future__ import annotations

import pytest

from narrowpath.cost.collectives import ring
from narrowpath.network.paths import PathModel


def test_a_ring_broadcast_pays_a_hop_per_member_but_the_root():
    """A broadcast of 8 B over 4 ranks of one NVLink domain is one pass around the ring: n − 1 = 3 hops, as an
    all-gather's. With a Simple NVLink hop α_up = 3.4 µs the LL hop is 0.47 µs (tuning.cc hwLat .47 / 1.9 / 3.4 µs
    for LL / LL128 / Simple), so LL costs its base 6.6 µs + 3 · 0.47 µs = 8.01 µs (LL128 14.0 + 3 · 1.9 = 19.7 µs,
    Simple 8.4 + 3 · 3.4 = 18.6 µs): an 8-byte broadcast goes LL with a latency of 8.01 µs (one hop would be
    7.07 µs)."""
    pm = PathModel(size=4, ranks_per_domain=4, domains=1, up_bw=100e9, nic_bw=50e9, alpha_up_s=3.4e-6,
                   alpha_out_s=9.6e-6)
    c = ring("broadcast", 8.0, pm)
    assert c.protocol == "LL"
    assert c.latency_s == pytest.approx(8.01e-6, rel=1e-12)


def test_an_ll_ring_over_two_nodes_runs_at_a_quarter_of_the_bus_bandwidth():
    """NCCL's tuning.cc derates ring LL to 1/4 of the bus bandwidth for an all-reduce or whenever nNodes > 1, else
    1/3 — so an all-gather over two nodes (one rank each) is at 1/4. Its bus bandwidth is one NIC, 50 GB/s, and
    busbw/algbw = (n − 1)/n = 1/2, so algbw = 100 GB/s and LL moves 25 GB/s. 100 kB: one network hop, LL latency
    6.6 µs + 2.7 µs = 9.3 µs, + 1e5 / 25e9 s = 4.0 µs → 13.3 µs (LL128 18.0 + 1.09 µs, Simple 18.0 µs + more:
    LL wins). At 1/3 it would be 9.3 + 3.0 = 12.3 µs."""
    pm = PathModel(size=2, ranks_per_domain=1, domains=2, up_bw=100e9, nic_bw=50e9, alpha_up_s=3.4e-6,
                   alpha_out_s=9.6e-6)
    c = ring("all_gather", 1e5, pm)
    assert c.protocol == "LL"
    assert c.latency_s == pytest.approx(9.3e-6, rel=1e-12)
    assert c.time_s == pytest.approx(13.3e-6, rel=1e-12)
