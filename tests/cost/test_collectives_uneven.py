"""A group whose scale-up domains hold unequal numbers of its ranks (9 GPUs on 8-GPU nodes: 8 + 1) waits for its
busiest domain's chain and ring, while its fewest members bound the rails across domains (fifty-sixth session's
review: with the fewest taken for both, a 9-GPU 8-byte all-reduce took 13.9 µs against 20.2 µs on 8 GPUs, and on
NVL72 racks 129 GPUs 21 µs against 162 µs on 128)."""
from __future__ import annotations

import pytest

from narrowpath.catalog import calibration_for, system
from narrowpath.cost.collectives import collective_time
from narrowpath.network.placement import contiguous_span


def _t(sysname: str, n: int, size: float, algorithm: str = "auto") -> float:
    sysm = system(sysname)
    return collective_time("all_reduce", size, contiguous_span(n, sysm), sysm,
                           calibration_for(sysm.device.name), algorithm).time_s


def test_the_span_counts_the_busiest_domain():
    h100 = system("dgx-h100")
    nine = contiguous_span(9, h100)
    assert (nine.ranks_per_domain, nine.busiest_domain, nine.domains) == (1, 8, 2)
    assert contiguous_span(16, h100).busiest_domain == 0  # every domain alike


@pytest.mark.parametrize("sysname, sizes", [("dgx-h100", range(8, 25)), ("gb200-nvl72", (64, 128, 129, 144, 192))])
def test_a_small_all_reduce_never_gets_faster_with_more_gpus(sysname, sizes):
    """8 bytes: latency, and 8 bytes at the group's bus rate (a few ns, which more rails can shorten). Adding ranks
    never removes a hop: the time never falls by more than those nanoseconds (it fell by 30 % at every 8k + 1)."""
    times = [_t(sysname, n, 8.0) for n in sizes]
    assert all(b >= a * (1 - 1e-4) for a, b in zip(times, times[1:])), list(zip(sizes, times))


def test_the_tree_chains_the_busiest_domain():
    """Tree latency 2((r − 1)α_up + ⌈log2 d⌉ α_out): 9 GPUs (8 + 1) chain 7 NVLink hops each way like 16 (8 + 8),
    so their 8-byte trees take the same time to the nanoseconds the 8 bytes take; with the fewest (1) they took 14
    hops fewer."""
    assert _t("dgx-h100", 9, 8.0, "tree") == pytest.approx(_t("dgx-h100", 16, 8.0, "tree"), rel=1e-4)


def test_hierarchical_runs_the_busiest_domains_ring():
    """9 GPUs, 8 bytes, hierarchical: reduce-scatter and all-gather inside the 8-GPU domain plus the cross-domain
    all-reduce — not the cross-domain part alone (the lone GPU's domain has no ring of its own, node 0's does)."""
    t9 = _t("dgx-h100", 9, 8.0, "hierarchical")
    assert t9 > _t("dgx-h100", 8, 8.0, "ring")
