"""The catalog holds vendors' figures: each checked here against the datasheet number written out (converted by
hand to SI), so that a typo in the YAML fails. Also the unit constants every conversion at the edges uses."""
from __future__ import annotations

import pytest

from narrowpath import units
from narrowpath.catalog import device, system


def test_unit_constants():
    """GB = 1e9 B, GiB = 2^30 = 1,073,741,824 B; 400 Gb/s (NDR InfiniBand) = 50e9 B/s; 1 µs = 1e-6 s."""
    assert (units.GB, units.GiB, units.TiB) == (1e9, 1_073_741_824, 1_099_511_627_776)
    assert 400 * units.GBIT_PER_S == 50e9 and units.US == 1e-6 and units.TFLOP == 1e12
    assert units.BYTES_PER_DTYPE["bf16"] == 2 and units.BYTES_PER_DTYPE["fp8"] == 1


@pytest.mark.parametrize("dev, bf16, fp8, hbm_bw, hbm_gib, tdp", [
    # NVIDIA A100 datasheet: BF16 312 TFLOPS dense, 2,039 GB/s HBM2e, 80 GB, 400 W (SXM)
    ("A100-SXM4-80GB", 312e12, None, 2.039e12, 80, 400),
    # NVIDIA H100 datasheet (SXM): BF16 1,979 / FP8 3,958 TFLOPS with sparsity = 989.4 / 1,978.9 dense;
    # 3.35 TB/s HBM3; 80 GB; up to 700 W
    ("H100-SXM5-80GB", 989.4e12, 1978.9e12, 3.35e12, 80, 700),
    # DGX B200: 72 PFLOPS FP8 training (sparse) over 8 GPUs = 4.5 PFLOPS dense per GPU; BF16 half of it
    ("B200", 2.25e15, 4.5e15, 7.7e12, None, 1000),
])
def test_device_figures_are_the_datasheets(dev, bf16, fp8, hbm_bw, hbm_gib, tdp):
    d = device(dev)
    assert d.matrix_peak("bf16") == bf16 and d.hbm.bw_bytes_per_s == hbm_bw and d.tdp_w == tdp
    if fp8:
        assert d.matrix_peak("fp8") == fp8
    if hbm_gib:
        assert d.hbm.capacity_bytes == pytest.approx(hbm_gib * 2**30, rel=1e-3)  # "80 GB" is 80 GiB of HBM


@pytest.mark.parametrize("sid, nvlink, nic, per_node, domain", [
    # DGX A100: NVLink3 600 GB/s bidirectional = 300 per direction; 8× HDR 200 Gb/s = 25 GB/s per GPU
    ("dgx-a100", 300e9, 25e9, 8, 8),
    # DGX H100: NVLink4 900 GB/s bidirectional = 450; 8× NDR 400 Gb/s ConnectX-7 = 50 GB/s per GPU
    ("dgx-h100", 450e9, 50e9, 8, 8),
    # GB200 NVL72: NVLink5 1.8 TB/s bidirectional = 900 per direction; 72 GPUs in one NVLink domain, 4 per tray
    ("gb200-nvl72", 900e9, 50e9, 4, 72),
])
def test_system_figures_are_the_datasheets(sid, nvlink, nic, per_node, domain):
    s = system(sid)
    assert s.tier("scale_up").bw_bytes_per_s_per_gpu == nvlink and s.tier("scale_out").bw_bytes_per_s_per_gpu == nic
    assert (s.gpus_per_node, s.scale_up_domain) == (per_node, domain)
