"""Collective costs checked by hand where mutation testing (benchmarks/mutation.py, seed 17) found them loose: the
latency part of an NVLS all-reduce and the list of algorithms an unknown name is answered with."""
from __future__ import annotations

import pytest

from narrowpath.catalog import calibration_for, system
from narrowpath.cost.collectives import collective_time
from narrowpath.errors import SpecError
from narrowpath.network.placement import contiguous_span


def test_an_nvls_all_reduce_reports_its_fixed_latency_apart_from_its_bandwidth_term():
    """DGX H100, 8 GPUs in one NVSwitch domain, 2 GiB all-reduce by NVLS. Its latency is NCCL's NVLS hop,
    25 µs (tuning.cc hwLat[NVLINK][NVLS][Simple]); CollectiveCost.latency_s carries it so that a slowed link
    (simulate's slow-link perturbation) stretches only the bandwidth term. That term: the calibrated NVLS busbw
    480 GB/s over 2·7/8 gives algbw 480e9·8/14 = 274.29 GB/s, below NVLink's 450e9·0.82 = 369 GB/s, at the full
    Simple ramp (2^31 B >= 1 GiB): 2^31·14/3.84e12 = 7.829367 ms; total 7.854367 ms."""
    s = system("dgx-h100")
    c = collective_time("all_reduce", 2**31, contiguous_span(8, s), s, calibration_for("H100-SXM5-80GB"), "nvls")
    assert c.algorithm == "nvls" and c.protocol == "Simple"
    assert c.latency_s == pytest.approx(25e-6, rel=1e-12)
    assert c.time_s - c.latency_s == pytest.approx(2**31 * 14 / 3.84e12, rel=1e-9)
    assert c.time_s == pytest.approx(7.854367e-3, rel=1e-6)


def test_an_unknown_algorithm_is_answered_with_the_known_ones_comma_separated():
    """The CLI prints a SpecError as `field: message`; an unknown algorithm lists `auto` and the seven algorithms
    of the registry (ring, tree, hierarchical, nvls, sharp, direct, p2p), separated by ', '."""
    s = system("dgx-h100")
    with pytest.raises(SpecError) as err:
        collective_time("all_reduce", 1e6, contiguous_span(8, s), s, calibration_for("H100-SXM5-80GB"), "bogus")
    assert err.value.field == "collective.algorithm"
    assert str(err.value) == ("collective.algorithm: unknown algorithm 'bogus'; known: auto, ring, tree, "
                              "hierarchical, nvls, sharp, direct, p2p")
