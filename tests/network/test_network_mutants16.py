"""Path-model values checked by hand where mutation testing (benchmarks/mutation.py, seed 16) found them loose:
the NIC line rate that scales a measured scale-out busbw table."""
from __future__ import annotations

import dataclasses

import pytest

from narrowpath.catalog import calibration_for, system
from narrowpath.cost.collectives import ring
from narrowpath.network.paths import path_model
from narrowpath.network.placement import span_of


def test_a_measured_scale_out_table_is_scaled_by_the_nic_line_rate():
    """DGX H100's NIC line rate is 400 Gb/s = 50 GB/s per GPU. With a measured scale-out busbw table of a flat 0.5
    of line rate, an all-reduce of 1e7 bytes over 16 nodes, one rank each (ring bounded by the fabric), runs at
    busbw 1 · 50e9 · 0.5 = 25 GB/s: time 1e7 · 2·15/16 / 25e9 = 750 µs, protocol `measured`."""
    s = system("dgx-h100")
    cal = calibration_for(s.device.name)
    tc = dataclasses.replace(cal.tier("scale_out"), busbw_efficiency_by_size=((1e3, 0.5), (1e9, 0.5)))
    measured = dataclasses.replace(cal, tiers={**cal.tiers, "scale_out": tc})
    pm = path_model(span_of(16, ranks_per_domain=1, domains=16), s, measured)
    assert pm.nic_line_bw == s.tier("scale_out").bw_bytes_per_s_per_gpu == 50e9
    assert pm.ring_tier == "scale_out" and pm.measured_busbw(1e7) == pytest.approx(25e9, rel=1e-12)
    c = ring("all_reduce", 1e7, pm)
    assert c.protocol == "measured" and c.bottleneck_tier == "scale_out"
    assert c.time_s == pytest.approx(1e7 * 2 * 15 / 16 / 25e9, rel=1e-12) == pytest.approx(750e-6, rel=1e-12)
