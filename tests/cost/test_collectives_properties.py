"""Properties every collective price must keep, on every catalog system: monotone in size for each op and each
applicable algorithm, `auto` never slower than an explicit algorithm, more bandwidth never slower."""
from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from narrowpath.catalog import calibration_for, store, system
from narrowpath.cost.collectives import OPS, REGISTRY, collective_time, simple_ramp
from narrowpath.errors import SpecError
from narrowpath.network.placement import contiguous_span, span_of

SYSTEMS = tuple(store.system_ids())


def _setup(sid: str):
    s = system(sid)
    return s, calibration_for(s.device.name)


def _spans(s):
    """One node, one full scale-up domain, several domains, and a sparse group (one rank per domain)."""
    out = [contiguous_span(2, s), contiguous_span(s.gpus_per_node, s), contiguous_span(4 * s.scale_up_domain, s),
           span_of(16, ranks_per_domain=1, domains=16)]
    return out


def _time(op, size, span, s, cal, alg):
    try:
        return collective_time(op, size, span if op != "send_recv" else span_of(
            2, ranks_per_domain=min(2, span.ranks_per_domain), domains=1 if span.domains == 1 else 2),
            s, cal, alg).time_s
    except SpecError:
        return None


@settings(max_examples=150, deadline=None)
@given(sid=st.sampled_from(SYSTEMS), op=st.sampled_from(OPS), alg=st.sampled_from(("auto", *REGISTRY)),
       which=st.integers(0, 3), a=st.floats(1, 1e10), b=st.floats(1, 1e10))
def test_time_is_monotone_in_size_for_every_system_op_and_algorithm(sid, op, alg, which, a, b):
    """More bytes never take less time (nccl-tests sweeps are monotone in time)."""
    s, cal = _setup(sid)
    span = _spans(s)[which]
    lo, hi = sorted((a, b))
    t_lo, t_hi = _time(op, lo, span, s, cal, alg), _time(op, hi, span, s, cal, alg)
    if t_lo is not None:
        assert t_lo <= t_hi * (1 + 1e-12)


@pytest.mark.parametrize("sid", SYSTEMS)
@pytest.mark.parametrize("op", OPS)
def test_auto_is_never_slower_than_any_explicit_algorithm(sid, op):
    s, cal = _setup(sid)
    for span in _spans(s):
        for size in (8, 4096, 1 << 20, 48e6, 1 << 30, 8e9):
            auto = _time(op, size, span, s, cal, "auto")
            for name in REGISTRY:
                t = _time(op, size, span, s, cal, name)
                if t is not None:
                    assert auto <= t * (1 + 1e-12), (op, name, size)


def _faster(s, tier: str, factor: float):
    t = dataclasses.replace(s.tier(tier), bw_bytes_per_s_per_gpu=s.tier(tier).bw_bytes_per_s_per_gpu * factor)
    return dataclasses.replace(s, tiers=tuple(t if x.name == tier else x for x in s.tiers))


@settings(max_examples=80, deadline=None)
@given(sid=st.sampled_from(SYSTEMS), op=st.sampled_from(OPS), tier=st.sampled_from(("scale_up", "scale_out")),
       factor=st.floats(1.0, 8.0), which=st.integers(0, 3), size=st.floats(1, 1e10))
def test_more_bandwidth_is_never_slower(sid, op, tier, factor, which, size):
    """Raising a tier's line rate never lengthens any collective (auto choice)."""
    s, cal = _setup(sid)
    span = _spans(s)[which]
    fast = _faster(s, tier, factor)
    assert _time(op, size, span, fast, cal, "auto") <= _time(op, size, span, s, cal, "auto") * (1 + 1e-12)


def test_simple_ramp_follows_nccl_table_and_keeps_time_monotone():
    """NCCL tuning.cc Simple row: .9 at 64 B, .5 at 1 MB, .8 at 8 MB, .9 at 256 MB, 1 from 1 GiB; size/factor grows."""
    assert simple_ramp(64) == pytest.approx(0.9) and simple_ramp(2**20) == pytest.approx(0.5)
    assert simple_ramp(8 * 2**20) == pytest.approx(0.8) and simple_ramp(256 * 2**20) == pytest.approx(0.9)
    assert simple_ramp(2**30) == 1.0 and simple_ramp(8e9) == 1.0
    sizes = [64 * 1.1**k for k in range(300)]
    ratios = [x / simple_ramp(x) for x in sizes]
    assert all(r0 < r1 for r0, r1 in zip(ratios, ratios[1:]))
