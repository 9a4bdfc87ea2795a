"""Golden collective times by hand, on path models with round numbers: NCCL's tuning model (src/graph/tuning.cc:
base latencies ring/tree Simple 8.4 µs, LL 6.6 µs; LL hops 0.47/3.4 of a Simple NVLink hop; tree bandwidth 0.9 of
the ring's, halved for the two trees' up and down passes) and the nccl-tests conventions (doc/PERFORMANCE.md).

Legend: 2 domains × 8 GPUs unless stated; NVLink 400 GB/s per GPU, NIC 40 GB/s per GPU, hop latency 1 µs on
NVLink and 5 µs on the network. Messages of 4 GB are past NCCL's size correction (factor 1 from 1 GiB)."""
from __future__ import annotations

import dataclasses
import math

import pytest

from narrowpath.cost.collectives import (bus_factor, collective_time, direct, hierarchical, nvls, p2p, ring,
                                         ring_steps, sharp, simple_ramp, tree)
from narrowpath.errors import SpecError
from narrowpath.network.paths import PathModel, interpolate_log, path_model
from narrowpath.network.placement import span_of
from narrowpath.spec.calibration import Calibration, TierCalibration
from narrowpath.spec.device import Device, Level
from narrowpath.spec.system import System, Tier

S = 4e9


def pm(size=16, r=8, d=2, **kw) -> PathModel:
    return PathModel(size=size, ranks_per_domain=r, domains=d, up_bw=400e9, nic_bw=40e9, alpha_up_s=1e-6,
                     alpha_out_s=5e-6, **kw)


def test_nccl_tests_conventions():
    """busbw/algbw: all_reduce 2(n−1)/n (8 ranks: 1.75), all_gather/reduce_scatter/all_to_all (n−1)/n (0.875),
    point-to-point 1, one rank 0; ring α-steps 2(n−1) for all_reduce, n−1 for the others."""
    assert bus_factor("all_reduce", 8) == 1.75 and bus_factor("all_gather", 8) == 0.875
    assert bus_factor("all_to_all", 8) == 0.875 and bus_factor("send_recv", 2) == 1.0
    assert bus_factor("all_reduce", 1) == 0.0
    assert (ring_steps("all_reduce", 8), ring_steps("reduce_scatter", 8), ring_steps("send_recv", 2)) == (14, 7, 1)
    assert (ring_steps("broadcast", 8), ring_steps("all_to_all", 8)) == (7, 7)


def test_nccl_simple_protocol_size_correction():
    """tuning.cc's Simple-protocol factors at 64·2^i bytes, interpolated in log2 size: 64 B and below 0.9; 8 KiB
    (i = 7) 0.8, halfway to 16 KiB 0.75; 2^29 B 0.9, 2^29.5 B 0.95 (towards 1 at 1 GiB); 1 GiB and up: 1."""
    assert simple_ramp(10) == 0.9 and simple_ramp(8192) == pytest.approx(0.8)
    assert simple_ramp(64 * 2 ** 7.5) == pytest.approx(0.75)
    assert simple_ramp(2 ** 29) == pytest.approx(0.9) and simple_ramp(2 ** 29.5) == pytest.approx(0.95)
    assert simple_ramp(2 ** 30) == 1.0 and simple_ramp(S) == 1.0


def test_ring_all_reduce_in_one_domain_by_hand():
    """8 ranks, Simple: 8.4 µs + 14 hops × 1 µs + S·2(n−1)/n / 400 GB/s = 22.4 µs + 17.5 ms; busbw = S·1.75/t;
    each rank sends S·1.75 = 7 GB."""
    c = ring("all_reduce", S, pm(size=8, d=1))
    assert c.time_s == pytest.approx(22.4e-6 + 17.5e-3) and c.protocol == "Simple"
    assert (c.latency_s, c.wire_bytes_per_rank) == (pytest.approx(22.4e-6), 7e9)
    assert c.busbw_bytes_per_s == pytest.approx(7e9 / c.time_s)


def test_ring_all_reduce_of_a_small_message_uses_ll():
    """64 B on 8 ranks: LL wins — 6.6 µs + 14 × 1 µs × 0.47/3.4 + 64·1.75 / (400 GB/s / 4) = 8.5364 µs."""
    c = ring("all_reduce", 64, pm(size=8, d=1))
    assert c.protocol == "LL" and c.time_s == pytest.approx(6.6e-6 + 14e-6 * 0.47 / 3.4 + 64 * 1.75 * 4 / 400e9)


def test_ll_carries_a_third_of_the_bandwidth_for_gathers_in_one_domain():
    """tuning.cc: LL moves 8-byte lines with a 4-byte flag; NCCL derates ring LL all-reduce (and anything across
    nodes) to a quarter, other ops inside a node to a third: an all-gather of 64 B on 8 ranks in one domain takes
    6.6 µs + 7 hops × 1 µs × 0.47/3.4 + 64·0.875 / (400 GB/s / 3)."""
    c = ring("all_gather", 64, pm(size=8, d=1))
    assert c.protocol == "LL" and c.time_s == pytest.approx(6.6e-6 + 7e-6 * 0.47 / 3.4 + 64 * 0.875 * 3 / 400e9)


def test_ring_across_domains_runs_one_ring_per_rail():
    """16 ranks on 2 × 8: NCCL lays one ring per NIC rail, 8 × 40 GB/s = 320 GB/s (below NVLink): all_gather of S
    at algbw 320e9/(15/16): 4e9·0.9375/320e9 = 11.71875 ms; latency 8.4 µs + 14 NVLink hops × 1 µs + 1 network
    hop × 5 µs = 27.4 µs; bounded by the scale-out tier."""
    c = ring("all_gather", S, pm())
    assert c.time_s == pytest.approx(27.4e-6 + 11.71875e-3) and c.bottleneck_tier == "scale_out"


def test_tree_all_reduce_bandwidth_is_nine_tenths_of_the_ring_halved():
    """Double binary tree (NCCL 2.4; tuning.cc busBw·0.9, two passes): algbw 0.9 · 320 GB/s / 2 = 144 GB/s;
    latency 8.4 µs + 2·(7 NVLink hops × 1 µs + ⌈log2 2⌉ × 5 µs) = 32.4 µs: t = 32.4 µs + 4e9/144e9 =
    27.8102 ms; each rank sends 2S. Not defined inside one domain."""
    c = tree("all_reduce", S, pm())
    assert c.time_s == pytest.approx(32.4e-6 + 4e9 / 144e9) and c.wire_bytes_per_rank == 2 * S
    assert tree("all_reduce", S, pm(size=8, d=1)) is None and tree("all_gather", S, pm()) is None


def test_hierarchical_all_reduce_by_hand():
    """Reduce-scatter in the domain (8.4 + 7 µs + 4e9·0.875/400e9 = 8.7654 ms), all-reduce of S/8 = 0.5 GB over the
    2-rank rail ring, all-gather in the domain (8.7654 ms). For 0.5 GB NCCL's model prefers LL128 (0.92 of the
    bandwidth) to Simple (0.9 size correction at 2^28.9 B): 14 µs + 2 network hops × 5 µs × 4.0/9.6 +
    5e8/(0.92·40e9) = 13.6051 ms; total 31.1359 ms. The domain's legs (17.53 ms) outlast the rails' (13.61 ms):
    the bottleneck is scale_up."""
    c = hierarchical("all_reduce", S, pm())
    assert c.time_s == pytest.approx(2 * (15.4e-6 + 8.75e-3) + 14e-6 + 10e-6 * 4.0 / 9.6 + 5e8 / (0.92 * 40e9))
    assert c.latency_s == pytest.approx(2 * 15.4e-6 + 14e-6 + 10e-6 * 4.0 / 9.6)  # the size-independent part
    assert c.busbw_bytes_per_s == pytest.approx(S * 2 * 15 / 16 / c.time_s)  # nccl-tests: 2(n − 1)/n, n = 16
    assert (c.bottleneck_tier, c.wire_bytes_per_rank) == ("scale_up", S * 2 * 15 / 16)


def test_direct_all_to_all_sends_n_minus_r_over_n_through_the_nic():
    """All-to-all of S = 1.6 GB on 16 ranks, 8 per domain: (r−1)/n = 7/16 of S over NVLink (1.75 ms) while
    (n−r)/n = 8/16 leaves the domain through the rank's NIC (1.6e9·0.5/40e9 = 20 ms); latency 8.4 µs +
    ⌈15/8⌉ = 2 peer rounds × 5 µs: 20.0184 ms, NIC-bound. Each rank sends S·15/16. In one domain of 8:
    S·7/8/400e9 = 3.5 ms + 8.4 + 1 µs."""
    c = direct("all_to_all", 1.6e9, pm())
    assert c.time_s == pytest.approx(18.4e-6 + 20e-3) and c.bottleneck_tier == "scale_out"
    assert c.wire_bytes_per_rank == pytest.approx(1.5e9)
    one = direct("all_to_all", 1.6e9, pm(size=8, d=1))
    assert one.time_s == pytest.approx(9.4e-6 + 3.5e-3) and one.bottleneck_tier == "scale_up"
    assert (c.latency_s, one.latency_s) == (pytest.approx(18.4e-6), pytest.approx(9.4e-6))
    pair = direct("all_to_all", 1.6e9, pm(size=2, r=2, d=1))  # 2 ranks: half of S crosses NVLink
    assert pair.time_s == pytest.approx(9.4e-6 + 1.6e9 / 2 / 400e9)


def test_point_to_point_by_hand():
    """Hockney α-β: inside a domain 8.4 µs + 1 µs + S/400e9 = 10.0094 ms; across domains over the NIC
    8.4 + 5 µs + S/40e9 = 100.0134 ms."""
    assert p2p("send_recv", S, pm(size=2, r=2, d=1)).time_s == pytest.approx(9.4e-6 + 0.01)
    assert p2p("send_recv", S, pm(size=2, r=1, d=2)).time_s == pytest.approx(13.4e-6 + 0.1)


def test_nvls_and_sharp_by_hand():
    """NVLS in one domain: 25 µs + S/min(NVLS algbw 300 GB/s, NVLink 400 GB/s) = 13.358 ms (capped by the link
    when the NVLS figure exceeds it: S/400e9). SHARP across 2 domains: one network round trip 2 × 5 µs + 8.4 µs,
    domain reduce-scatter and all-gather (2 × 8.7654 ms), and S/8 up and down once at 0.9 · 40 GB/s with the
    size correction 0.9 for 0.5 GB: 15.432 ms; total 32.981 ms."""
    assert nvls("all_reduce", S, pm(size=8, d=1, nvls_algbw=300e9)).time_s == pytest.approx(25e-6 + S / 300e9)
    assert nvls("all_reduce", S, pm(size=8, d=1, nvls_algbw=500e9)).time_s == pytest.approx(25e-6 + S / 400e9)
    assert nvls("all_reduce", S, pm(nvls_algbw=300e9)) is None  # NVLS does not cross domains
    c = sharp("all_reduce", S, pm(out_in_network=True))
    assert (c.algorithm, c.bottleneck_tier, c.protocol) == ("sharp", "scale_out", "Simple")
    assert c.time_s == pytest.approx(18.4e-6 + 2 * (15.4e-6 + 8.75e-3) + 5e8 / (0.9 * 40e9 * 0.9))
    assert sharp("all_reduce", S, pm()) is None


def test_measured_busbw_table_replaces_the_alpha_beta_ramp():
    """A measured NVLink table (1 MB: 0.5, 1 GB: 0.8 of the 500 GB/s line): an all-reduce of 1 GB on 8 ranks
    runs at busbw 400 GB/s: 1e9·1.75/400e9 = 4.375 ms; halfway in log size (31.6 MB) 0.65 → 325 GB/s; below the
    smallest measured size the time is that size's: 1e6·1.75/(250e9) = 7 µs."""
    m = pm(size=8, d=1, up_line_bw=500e9, up_measured=((1e6, 0.5), (1e9, 0.8)))
    assert ring("all_reduce", 1e9, m).time_s == pytest.approx(4.375e-3)
    assert (ring("all_reduce", 1e9, m).algorithm, ring("all_reduce", 1e9, m).protocol) == ("ring", "measured")
    assert ring("all_reduce", math.sqrt(1e15), m).busbw_bytes_per_s == pytest.approx(325e9)
    assert ring("all_reduce", 1e5, m).time_s == pytest.approx(7e-6)
    assert ring("all_reduce", 1e5, m).busbw_bytes_per_s == pytest.approx(1e5 * 1.75 / 7e-6)
    # reduce-scatter reads the same table: 1 GB at busbw 400 GB/s with its factor 7/8: 2.1875 ms
    assert ring("reduce_scatter", 1e9, m).time_s == pytest.approx(1e9 * 0.875 / 400e9)
    assert interpolate_log(((1.0, 2.0), (100.0, 4.0)), 10.0) == pytest.approx(3.0)
    # a table measured twice at one size takes the later point there, no division by a zero log-width
    assert interpolate_log(((1.0, 2.0), (1.0, 3.0), (100.0, 4.0)), 1.0) == 2.0
    assert interpolate_log(((1.0, 2.0), (10.0, 3.0), (10.0, 5.0)), 10.0) == 3.0


def _system(nvls_ok: bool = True) -> System:
    dev = Device(name="d", peak_matrix_flop_per_s={"bf16": 1e15}, peak_vector_flop_per_s={},
                 levels=(Level(name="hbm", capacity_bytes=8e10, bw_bytes_per_s=2e12),))
    return System(name="s", device=dev, gpus_per_node=8, tiers=(
        Tier(name="scale_up", bw_bytes_per_s_per_gpu=450e9, domain_size=8, latency_s=0.5e-6,
             in_network_reduction=nvls_ok),
        Tier(name="scale_out", bw_bytes_per_s_per_gpu=50e9, latency_s=2e-6)))


CAL = Calibration(name="c", device="d", matrix_efficiency={"bf16": 0.8}, tiers={
    "scale_up": TierCalibration(bw_efficiency=0.8, alpha_s=3e-6, nvls_busbw_bytes_per_s=420e9),
    "scale_out": TierCalibration(bw_efficiency=0.95, alpha_s=6e-6)})


def test_path_model_from_system_and_calibration_by_hand():
    """Attained rates are line × efficiency: NVLink 450 × 0.8 = 360 GB/s, NIC 50 × 0.95 = 47.5 GB/s; a hop is the
    calibrated α plus the tier's wire latency: 3.5 µs and 8 µs; the NVLS busbw of a full domain of 8 (420 GB/s)
    is the algbw 420·8/(2·7) = 240 GB/s. A ring's bus bandwidth across 2 domains of 8 is min(360, 8 × 47.5) =
    360 GB/s, bound by NVLink; with 4 per domain 4 × 47.5 = 190 GB/s, bound by the NICs; a sparse group (1 per
    domain) has one NIC, 47.5 GB/s."""
    p = path_model(span_of(16, ranks_per_domain=8, domains=2), _system(), CAL)
    assert (p.up_bw, p.nic_bw) == (pytest.approx(360e9), pytest.approx(47.5e9))
    assert (p.alpha_up_s, p.alpha_out_s) == (pytest.approx(3.5e-6), pytest.approx(8e-6))
    assert p.nvls_algbw == pytest.approx(240e9)
    assert p.ring_busbw == pytest.approx(360e9) and p.ring_tier == "scale_up"
    four = path_model(span_of(8, ranks_per_domain=4, domains=2), _system(), CAL)
    assert four.ring_busbw == pytest.approx(190e9) and four.ring_tier == "scale_out"
    sparse = path_model(span_of(4, ranks_per_domain=1, domains=4), _system(), CAL)
    assert sparse.ring_busbw == pytest.approx(47.5e9) and sparse.ring_tier == "scale_out"
    assert path_model(span_of(8, ranks_per_domain=8, domains=1), _system(False), CAL).nvls_algbw == 0.0


def test_collective_time_picks_the_fastest_and_checks_its_input():
    """`auto` takes the fastest applicable algorithm (NCCL's tuner): on 2 × 8 with NVLS in the domain a 4 GB
    all-reduce is cheaper hierarchically than as a flat ring; one rank or 0 bytes cost nothing; all-to-all runs
    direct only."""
    span = span_of(16, ranks_per_domain=8, domains=2)
    best = collective_time("all_reduce", S, span, _system(), CAL)
    times = {a: collective_time("all_reduce", S, span, _system(), CAL, a).time_s
             for a in ("ring", "tree", "hierarchical")}
    assert best.time_s == min(times.values())
    assert collective_time("all_reduce", S, span_of(1, ranks_per_domain=1, domains=1), _system(), CAL).time_s == 0
    assert collective_time("all_reduce", 0, span, _system(), CAL).time_s == 0
    sharp_sys = dataclasses.replace(_system(), tiers=tuple(
        dataclasses.replace(t, in_network_reduction=True) if t.name == "scale_out" else t for t in _system().tiers))
    assert collective_time("all_reduce", S, span, sharp_sys, CAL, "sharp").algorithm == "sharp"
    with pytest.raises(SpecError, match=r"^collective\.algorithm: tree does not apply to all_gather on this group"):
        collective_time("all_gather", S, span, _system(), CAL, "tree")
    for bad in (dict(op="gather"), dict(algorithm="magic"), dict(op="all_to_all", algorithm="ring"),
                dict(message_bytes=-1.0), dict(algorithm="nvls")):
        kw = dict(op="all_reduce", message_bytes=S, algorithm="auto") | bad
        with pytest.raises(SpecError):
            collective_time(kw["op"], kw["message_bytes"], span, _system(), CAL, kw["algorithm"])


def _mesh_system(domain: int = 8, gpus: int = 8) -> System:
    dev = Device(name="d", peak_matrix_flop_per_s={"bf16": 1e15}, peak_vector_flop_per_s={},
                 levels=(Level(name="hbm", capacity_bytes=8e10, bw_bytes_per_s=2e12),))
    return System(name="m", device=dev, gpus_per_node=gpus, tiers=(
        Tier(name="scale_up", bw_bytes_per_s_per_gpu=448e9, domain_size=domain, latency_s=0.5e-6,
             topology="full_mesh"),
        Tier(name="scale_out", bw_bytes_per_s_per_gpu=50e9, latency_s=2e-6)))


def test_a_full_mesh_subgroup_reaches_its_peers_over_one_link_each():
    """A full mesh of 8 GPUs without a switch (MI300X's Infinity Fabric: 448 GB/s per GPU over 7 links, 64 GB/s
    each): attained up_bw 448 × 0.8 = 358.4 GB/s, one pair link 358.4/7 = 51.2 GB/s. A ring of all 8 drives every
    link, 358.4 GB/s; a ring of 2 GPUs has one link between them, 51.2 GB/s; of 4, 3 links, 153.6 GB/s — 1 GiB
    all-reduced by 2 GPUs takes 2·(1/2)·2^30 / 51.2e9 s (+ latency), 7× the whole-mesh rate's time. A group spread
    over 2 mesh domains with 4 members in each keeps 3 links inside each for its NVLink-style leg."""
    sysm = _mesh_system()
    whole = path_model(span_of(8, ranks_per_domain=8, domains=1), sysm, CAL)
    pair = path_model(span_of(2, ranks_per_domain=2, domains=1), sysm, CAL)
    four = path_model(span_of(4, ranks_per_domain=4, domains=1), sysm, CAL)
    assert whole.up_bw == pytest.approx(358.4e9) and whole.ring_busbw == pytest.approx(358.4e9)
    assert (pair.up_bw, four.up_bw) == (pytest.approx(51.2e9), pytest.approx(153.6e9))
    assert pair.pair_bw == four.pair_bw == pytest.approx(51.2e9)
    t2 = ring("all_reduce", 2**30, pair)
    assert t2.time_s - t2.latency_s == pytest.approx(2 * 0.5 * 2**30 / 51.2e9, rel=1e-9)
    spread = path_model(span_of(8, ranks_per_domain=4, domains=2), _mesh_system(domain=8, gpus=8), CAL)
    assert spread.up_bw == pytest.approx(153.6e9)
    # behind a switch (NVSwitch) a pair of GPUs still drives the whole per-GPU rate
    assert path_model(span_of(2, ranks_per_domain=2, domains=1), _system(), CAL).up_bw == pytest.approx(360e9)


def test_an_nvls_figure_measured_on_8_gpus_gives_the_same_switch_rate_in_a_72_gpu_domain():
    """The profiles' NVLS busbw is nccl-tests' on one 8-GPU board: 420 GB/s busbw is the algbw 420·8/(2·7) = 240 GB/s
    a GPU sees from the switch. An NVL72 domain carrying the same figure keeps that algbw (converting with its 72
    GPUs, 420·72/142 = 213 GB/s, would make the same NVLink 11 % slower in the larger rack)."""
    nvl = dataclasses.replace(_system(), tiers=(dataclasses.replace(_system().tiers[0], domain_size=72),
                                                _system().tiers[1]))
    assert path_model(span_of(8, ranks_per_domain=8, domains=1), nvl, CAL).nvls_algbw == pytest.approx(240e9)
    assert path_model(span_of(8, ranks_per_domain=8, domains=1), _system(), CAL).nvls_algbw == pytest.approx(240e9)


def test_a_full_mesh_of_one_gpu_has_no_pair_link():
    """A full-mesh tier whose domain is one GPU has no peer and so no pair link (pair_bw 0, not a division by
    zero): a group on it is priced as a sparse group over the NICs."""
    one = _mesh_system(domain=1, gpus=1)
    p = path_model(span_of(2, ranks_per_domain=1, domains=2), one, CAL)
    assert p.pair_bw == 0.0 and p.ring_busbw == pytest.approx(47.5e9)


def test_a_full_mesh_subgroup_reads_a_measured_table_on_its_own_links():
    """A measured busbw table is a share of the line rate: on the 8-GPU mesh (448 GB/s a GPU over 7 links) a table
    saying 0.5 at every size gives a whole-mesh ring 224 GB/s and a 2-GPU ring 0.5 × 448/7 = 32 GB/s, its one link's
    share; 1 GiB all-reduced by the pair then takes 2·(1/2)·2^30 / 32e9 s."""
    table = ((1e3, 0.5), (1e10, 0.5))
    cal = dataclasses.replace(CAL, tiers={**CAL.tiers, "scale_up": dataclasses.replace(
        CAL.tiers["scale_up"], busbw_efficiency_by_size=table)})
    whole = path_model(span_of(8, ranks_per_domain=8, domains=1), _mesh_system(), cal)
    pair = path_model(span_of(2, ranks_per_domain=2, domains=1), _mesh_system(), cal)
    assert whole.measured_busbw(2**30) == pytest.approx(224e9)
    assert pair.measured_busbw(2**30) == pytest.approx(32e9)
    t = ring("all_reduce", 2**30, pair)
    assert t.time_s == pytest.approx(2 * 0.5 * 2**30 / 32e9, rel=1e-9)


def test_send_recv_runs_simple_at_full_rate_above_the_ll_threshold():
    """NCCL runs a send/recv in LL up to 16 KiB and in Simple above, never LL128 (enqueue.cc addP2pToPlan), with
    no tuner model behind it. 16 MB across domains (NIC 40 GB/s): Simple, 8.4 µs + one 5 µs network hop +
    16e6/40e9 = 413.4 µs (LL128 read 14 + 5 · 4.0/9.6 + 16e6/(0.92 · 40e9) = 451.0 µs). 8 KiB inside a domain
    (NVLink 400 GB/s): LL, 6.6 µs + 1 µs · 0.47/3.4 + 8192/(400e9/3) = 6.80 µs."""
    c = p2p("send_recv", 16e6, pm(size=2, r=1, d=2))
    assert c.protocol == "Simple" and c.time_s == pytest.approx(8.4e-6 + 5e-6 + 16e6 / 40e9)
    assert c.latency_s == pytest.approx(13.4e-6) and c.bottleneck_tier == "scale_out"
    small = p2p("send_recv", 8192, pm(size=2, r=2, d=1))
    assert small.protocol == "LL"
    assert small.time_s == pytest.approx(6.6e-6 + 1e-6 * 0.47 / 3.4 + 8192 / (400e9 / 3))
    for size in (1e3, 16384, 16385, 1e5, 1e7, 1e9):
        assert p2p("send_recv", size, pm(size=2, r=1, d=2)).protocol != "LL128"


def test_a_measured_table_pays_the_ring_steps_of_the_group_it_prices():
    """A scale-out table measured on 2 ranks, priced for 8 sparse ranks (one a domain, 5 µs network hops): the
    table's busbw at 1 GB (0.5 of the 40 GB/s line, 20 GB/s) with the bus factor of 8 ranks, 2 · 7/8 · 1e9 /
    20e9 = 87.5 ms, plus the 14 − 2 = 12 ring steps the 2-rank measurement did not take, 60 µs: 87.56 ms. A
    group of the measured size pays none."""
    table = ((1e6, 0.3), (1e9, 0.5))
    model = pm(size=8, r=1, d=8, nic_line_bw=40e9, out_measured=table, out_measured_ranks=2)
    c = ring("all_reduce", 1e9, model)
    assert c.protocol == "measured" and c.time_s == pytest.approx(2 * 7 / 8 * 1e9 / 20e9 + 12 * 5e-6)
    two = ring("all_reduce", 1e9, pm(size=2, r=1, d=2, nic_line_bw=40e9, out_measured=table, out_measured_ranks=2))
    assert two.time_s == pytest.approx(1e9 / 20e9)


def test_a_group_across_domains_reads_the_scale_out_table():
    """16 ranks on 2 domains whose NVLink (300 GB/s attained) bounds the ring below 8 NICs' 320 GB/s:
    the group still crosses the network, so the scale-out table — measured as `calibrate --nccl-log` records a
    multi-node log, a share of r × NIC line rate (8 × 40 = 320 GB/s) — prices it: 0.5 → 160 GB/s busbw."""
    model = dataclasses.replace(pm(nic_line_bw=40e9, out_measured=((1e6, 0.5), (1e9, 0.5))), up_bw=300e9)
    assert model.ring_tier == "scale_up"
    c = ring("all_reduce", 1e8, model)
    assert c.protocol == "measured" and c.busbw_bytes_per_s == pytest.approx(160e9)


def test_no_ll128_over_pcie():
    """NCCL enables LL128 only on an NVLink path (tuning.cc `typeIntra <= PATH_NVB`). 8 GPUs on a PCIe switch at
    25 GB/s, 8 MB all-reduce, one domain: LL128 would read 14 µs + 14 hops · 1 µs · 1.9/3.4 + 8e6 · 1.75 /
    (0.92 · 25e9) = 630.5 µs; without it Simple, 8.4 + 14 µs + 14e6 / (25e9 · ramp(8 MB)) = 728.4 µs (the ramp
    at 2^22.93 B between NCCL's 0.7 at 4 MiB and 0.8 at 8 MiB: 0.793), and the catalog's PCIe servers (L40S, RTX
    PRO 6000) say so."""
    model = PathModel(size=8, ranks_per_domain=8, domains=1, up_bw=25e9, nic_bw=25e9, alpha_up_s=1e-6,
                      alpha_out_s=5e-6)
    assert ring("all_reduce", 8e6, model).protocol == "LL128"
    c = ring("all_reduce", 8e6, dataclasses.replace(model, ll128=False))
    assert c.protocol == "Simple"
    assert c.time_s == pytest.approx(22.4e-6 + 14e6 / (25e9 * simple_ramp(8e6)))
    assert simple_ramp(8e6) == pytest.approx(0.7 + 0.1 * (math.log2(8e6) - 22))
    assert c.time_s == pytest.approx(728.4e-6, abs=0.1e-6)
    assert tree("all_reduce", 8e6, dataclasses.replace(model, ll128=False, domains=2, size=16)).protocol != "LL128"
    from narrowpath.catalog import calibration_for, system
    one_node = span_of(8, ranks_per_domain=8, domains=1)
    for name in ("l40s-pcie-server", "rtx-pro-6000-server"):
        sysm = system(name)
        cal = calibration_for(sysm.device.name)
        assert sysm.tier("scale_up").pcie and not path_model(one_node, sysm, cal).ll128
        assert all(collective_time("all_reduce", s, one_node, sysm, cal).protocol != "LL128"
                   for s in (1e5, 1e6, 1e7, 1e8))
    h100 = system("dgx-h100")
    assert path_model(one_node, h100, calibration_for(h100.device.name)).ll128


def test_only_a_scale_up_tier_is_pcie():
    with pytest.raises(SpecError, match=r"tier\[scale_out\]\.pcie"):
        Tier(name="scale_out", bw_bytes_per_s_per_gpu=50e9, pcie=True)


def test_a_smaller_group_than_the_tables_keeps_its_latency():
    """A scale-up table measured on 8 ranks priced for TP 2: how much of a measured time is latency the table does
    not say, so the 2-rank ring keeps it (the steps it does not take were subtracted, and an 8-byte all-reduce
    read 0 s). At 1 kB: 1e3 · 1 / (400 GB/s · 0.01) = 0.25 µs; at 100 MB the table's busbw with the 2-rank bus
    factor, 1e8 / (400e9 · interp(1e8))."""
    table = ((1e3, 0.01), (1e9, 0.9))
    model = pm(size=2, r=2, d=1, up_line_bw=400e9, up_measured=table, up_measured_ranks=8)
    assert ring("all_reduce", 1e3, model).time_s == pytest.approx(1e3 / (400e9 * 0.01))
    assert ring("all_reduce", 8, model).time_s == pytest.approx(1e3 / (400e9 * 0.01))  # the floor measured at 1 kB
    assert ring("all_reduce", 1e8, model).time_s == pytest.approx(1e8 / (400e9 * interpolate_log(table, 1e8)))


def test_send_recv_ll_threshold_is_per_channel_of_a_peer():
    """NCCL's LL threshold for a send/recv is P2P_LL_THRESHOLD (16 KiB) times the peer's channels (2): 32 KiB across
    domains runs LL, 6.6 µs + 5 µs · 2.7/9.6 + 32768/(40e9/4) = 11.28 µs; one byte more runs Simple."""
    assert p2p("send_recv", 32768, pm(size=2, r=1, d=2)).time_s == pytest.approx(6.6e-6 + 5e-6 * 2.7 / 9.6
                                                                                 + 32768 / 10e9)
    assert p2p("send_recv", 32769, pm(size=2, r=1, d=2)).protocol == "Simple"


def test_the_profiles_measured_group_size_reaches_the_path_model():
    """`calibrate --nccl-log` records the ranks a table was measured on (`measured_num_ranks`); path_model hands it
    on, so 8 sparse H100 ranks priced from a 2-rank scale-out table pay 12 more network steps than the table's
    own time: exactly 12 · α_out of the path model more than the same table recorded without its size."""
    from narrowpath.catalog import calibration_for, system
    sysm = system("dgx-h100")
    cal = calibration_for(sysm.device.name)
    out = dataclasses.replace(cal.tier("scale_out"), busbw_efficiency_by_size=((1e6, 0.3), (1e9, 0.9)),
                              measured_num_ranks=2)
    sized = dataclasses.replace(cal, tiers={**cal.tiers, "scale_out": out})
    unsized = dataclasses.replace(cal, tiers={**cal.tiers, "scale_out": dataclasses.replace(out, measured_num_ranks=0)})
    span = span_of(8, ranks_per_domain=1, domains=8)
    pm_sized = path_model(span, sysm, sized)
    assert pm_sized.out_measured_ranks == 2
    a = collective_time("all_reduce", 1e8, span, sysm, sized, "ring")
    b = collective_time("all_reduce", 1e8, span, sysm, unsized, "ring")
    assert a.protocol == b.protocol == "measured"
    assert a.time_s - b.time_s == pytest.approx(12 * pm_sized.alpha_out_s)
