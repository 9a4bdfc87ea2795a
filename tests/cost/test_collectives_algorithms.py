"""Every collective algorithm's result keeps NCCL's conventions: a protocol NCCL has, bus bandwidth × time = the
nccl-tests bus bytes, a latency that is a part of the time; and the NCCL constants by hand (tree LL bandwidth, the
protocol tie-break, the latency floor below a measured table, SHARP's legs)."""
from __future__ import annotations

import dataclasses

import pytest

from narrowpath.catalog import calibration_for, system
from narrowpath.cost.collectives import (PROTOCOLS, REGISTRY, _best, _BASE_LAT_S, _TREE_BW, bus_factor, ring,
                                         sharp, tree)
from narrowpath.network.paths import path_model
from narrowpath.network.placement import contiguous_span, span_of

OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "send_recv")


@pytest.fixture(scope="module")
def h100():
    s = system("dgx-h100")
    return s, calibration_for(s.device.name)


def _pms(s, cal):
    """One node, four nodes, one rank on each of 16 nodes — with in-network reduction on the fabric (SHARP)."""
    spans = [contiguous_span(8, s), contiguous_span(32, s), span_of(16, ranks_per_domain=1, domains=16)]
    return [dataclasses.replace(path_model(sp, s, cal), out_in_network=True) for sp in spans]


@pytest.mark.parametrize("size", [256.0, 65536.0, 4e6, 1e9])
def test_every_algorithm_reports_nccl_conventions(h100, size):
    """For every algorithm, op and group: the protocol is one of NCCL's (or `measured`); busbw · time is the
    nccl-tests bus bytes S·factor (S for broadcast and send/recv); 0 ≤ latency ≤ time."""
    s, cal = h100
    seen = set()
    for pm in _pms(s, cal):
        for name, fn in REGISTRY.items():
            for op in OPS:
                c = fn(op, size, pm if op != "send_recv" else pm.restricted(domains=min(2, pm.domains)))
                if c is None:
                    continue
                seen.add(name)
                n = pm.size if op != "send_recv" else 2
                bus = size * (bus_factor(op, n) if op not in ("broadcast", "send_recv") else 1.0)
                assert c.protocol in PROTOCOLS + ("measured",), (name, op)
                assert c.busbw_bytes_per_s * c.time_s == pytest.approx(bus, rel=1e-9), (name, op)
                assert 0 <= c.latency_s <= c.time_s * (1 + 1e-12), (name, op)
    assert {"ring", "tree", "hierarchical", "sharp", "direct"} <= seen


def test_equal_protocol_times_go_to_the_first_protocol():
    """NCCL's ncclTopoGetAlgoTime loop keeps a protocol only if strictly faster (`time < minTime`), so on a tie the
    first (LL, then LL128) wins."""
    assert _best((2e-6, 2e-6, 2e-6), (1e9, 1e9, 1e9), 0.0) == (2e-6, 0)
    assert _best((3e-6, 2e-6, 2e-6), (1e9, 1e9, 1e9), 0.0) == (2e-6, 1)


def test_tree_ll_bandwidth_is_the_trees_over_3_8(h100):
    """tuning.cc: tree LL runs at busBw/3.8 of the tree's; the tree's algbw is 0.9 · ring busbw / 2. A 1 KiB
    all-reduce over 4 nodes is latency-bound and takes LL: its time beyond the latency is S / that bandwidth."""
    s, cal = h100
    pm = path_model(contiguous_span(32, s), s, cal)
    S = 1024.0
    c = tree("all_reduce", S, pm)
    assert c.protocol == "LL"
    assert c.time_s - c.latency_s == pytest.approx(S / (_TREE_BW * pm.ring_busbw / 2 / 3.8), rel=1e-9)


def test_below_the_smallest_measured_size_a_ring_costs_the_latency_floor(h100):
    """A measured busbw table from 1 MB: a 100 kB all-reduce on 8 GPUs takes what 1 MB took (the latency floor,
    1e6 · 2·7/8 / (0.1 · line)); its busbw follows its own bytes, its wire bytes are 2·7/8 · 100 kB."""
    s, cal = h100
    tc = dataclasses.replace(cal.tier("scale_up"), busbw_efficiency_by_size=((1e6, 0.1), (1e8, 0.7)))
    measured = dataclasses.replace(cal, tiers={**cal.tiers, "scale_up": tc})
    pm = path_model(contiguous_span(8, s), s, measured)
    line = s.tier("scale_up").bw_bytes_per_s_per_gpu
    c = ring("all_reduce", 1e5, pm)
    t = 1e6 * (2 * 7 / 8) / (0.1 * line)
    assert c.time_s == pytest.approx(t, rel=1e-9) and c.latency_s == pytest.approx(t, rel=1e-9)
    assert c.protocol == "measured" and c.wire_bytes_per_rank == pytest.approx(1e5 * 2 * 7 / 8)
    assert c.busbw_bytes_per_s == pytest.approx(1e5 * 2 * 7 / 8 / t)


def test_sharp_latency_is_one_switch_round_trip_plus_the_domain_legs(h100):
    """SHARP over 4 nodes: intra-node reduce-scatter and all-gather, and one round trip to the switch: its latency
    is the sum of the legs' latencies and 2·α_out + the ring's Simple base latency."""
    s, cal = h100
    pm = dataclasses.replace(path_model(contiguous_span(32, s), s, cal), out_in_network=True)
    S = 1e8
    c = sharp("all_reduce", S, pm)
    up = pm.restricted(domains=1)
    rs, ag = ring("reduce_scatter", S, up), ring("all_gather", S, up)
    assert c.latency_s == pytest.approx(2 * pm.alpha_out_s + _BASE_LAT_S["ring"][2] + rs.latency_s + ag.latency_s,
                                        rel=1e-12)
    assert c.time_s > rs.time_s + ag.time_s
