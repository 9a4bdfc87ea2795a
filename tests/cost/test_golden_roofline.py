"""Golden operator times, the GEMM size ramp, the power-cap clock and the FLOP conventions, by hand on a device and
a calibration with round numbers (never the shipped calibration's own inputs echoed back)."""
from __future__ import annotations

import dataclasses
import math

import pytest

from narrowpath.cost.flops import korthikanti_model_flop, mfu, narayanan_eq3_flop
from narrowpath.cost.power import capped_device, clock_fraction
from narrowpath.cost.roofline import (bound, compute_time_s, flash_head_dim_rate, host_time_s, matrix_efficiency,
                                      memory_time_s, op_time_s, table_efficiency)
from narrowpath.spec.calibration import Calibration
from narrowpath.spec.device import Device, Level
from narrowpath.workload.items import Op

DEV = Device(name="round", peak_matrix_flop_per_s={"bf16": 1e15, "fp8": 2e15},
             peak_vector_flop_per_s={"fp32": 5e13}, tdp_w=700.0, idle_w=120.0,
             levels=(Level(name="hbm", capacity_bytes=80e9, bw_bytes_per_s=2e12),
                     Level(name="host", capacity_bytes=1e12, bw_bytes_per_s=5e10)))
CAL = Calibration(name="round", device="round", matrix_efficiency={"bf16": 0.8, "fp8": 0.6}, matrix_half_flop=1e9,
                  vector_bw_efficiency=0.9, kernel_overhead_s=5e-6, host_dispatch_s=2e-6, flash_efficiency=0.5)


def test_gemm_size_ramp_is_eff_max_f_over_f_plus_f_half():
    """eff(F) = eff_max·F/(F + F_half) (a saturating ramp): eff_max 0.8, F_half 1e9: F = 1e9 → 0.4 (half by
    definition), F = 3e9 → 0.6, F = 9e9 → 0.72; fp8 has its own eff_max 0.6: F = 1e9 → 0.3; MXFP8 GEMMs use the FP8
    entry; F_half = 0 means no ramp."""
    assert matrix_efficiency(1e9, "bf16", CAL) == pytest.approx(0.4)
    assert matrix_efficiency(3e9, "bf16", CAL) == pytest.approx(0.6)
    assert matrix_efficiency(9e9, "bf16", CAL) == pytest.approx(0.72)
    assert matrix_efficiency(1e9, "mxfp8", CAL) == pytest.approx(0.3)
    flat = Calibration(name="f", device="round", matrix_efficiency={"bf16": 0.8}, matrix_half_flop=0.0)
    assert matrix_efficiency(1e3, "bf16", flat) == 0.8


def test_measured_efficiency_table_interpolates_in_log_flops():
    """A measured table (1e9: 0.2, 1e11: 0.6, 1e13: 0.8): 1e10, halfway in log, 0.4; 1e12 → 0.7; above the last
    point 0.8; below the first the time stays the smallest GEMM's (latency-bound): 5e8 → 0.2·0.5 = 0.1."""
    pts = ((1e9, 0.2), (1e11, 0.6), (1e13, 0.8))
    assert table_efficiency(1e10, pts) == pytest.approx(0.4)
    assert table_efficiency(1e12, pts) == pytest.approx(0.7)
    assert table_efficiency(1e14, pts) == 0.8 and table_efficiency(1e13, pts) == 0.8
    assert table_efficiency(5e8, pts) == pytest.approx(0.1)
    assert table_efficiency(1e9, ((1e9, 0.2), (1e9, 0.3), (1e11, 0.6))) == pytest.approx(0.2)  # repeated size
    assert table_efficiency(2e9, ((1e9, 0.2), (2e9, 0.3), (2e9, 0.5), (1e11, 0.6))) == pytest.approx(0.3)
    cal = Calibration(name="t", device="round", matrix_efficiency={"bf16": 0.8},
                      matrix_efficiency_by_size={"bf16": pts})
    assert matrix_efficiency(1e10, "bf16", cal) == pytest.approx(0.4)
    # no fp8 table: the ramp, with the 16-bit eff_max (no fp8 entry) and the default F_half 2e9: 0.8·1e10/1.2e10
    assert matrix_efficiency(1e10, "fp8", cal) == pytest.approx(0.8 * 1e10 / 1.2e10)


def test_roofline_time_of_a_gemm_by_hand():
    """Williams et al. 2009 + launch cost: t = max(F/(peak·eff), bytes/(BW·eff_bw)) + kernels·overhead.
    F = 9e9 FLOPs (eff 0.72), 1e8 B: compute 9e9/(1e15·0.72) = 12.5 µs, memory 1e8/(2e12·0.9) = 55.6 µs:
    memory-bound, 55.56 + 5 = 60.56 µs. F = 9e12 (eff 0.8·9e12/(9e12 + 1e9)): 11.2512 ms, compute-bound."""
    small = Op("g", "matrix", "fwd", 9e9, 1e8, "bf16")
    assert compute_time_s(small, DEV, CAL) == pytest.approx(12.5e-6)
    assert memory_time_s(small, DEV, CAL) == pytest.approx(1e8 / 1.8e12)
    assert op_time_s(small, DEV, CAL) == pytest.approx(1e8 / 1.8e12 + 5e-6)
    assert bound(small, DEV, CAL) == "memory"
    big = Op("g", "matrix", "fwd", 9e12, 1e8, "bf16")
    assert op_time_s(big, DEV, CAL) == pytest.approx(9e12 / (1e15 * 0.8 * 9e12 / (9e12 + 1e9)) + 5e-6)
    assert bound(big, DEV, CAL) == "compute"


def test_grouped_gemm_ramps_like_one_group_and_flash_runs_at_its_fraction():
    """A grouped GEMM of 4 experts with 4e9 FLOPs in all ramps like one 1e9 GEMM (eff 0.4): 4e9/(1e15·0.4) =
    10 µs, plus 4 launches. Flash attention: 3e9 FLOPs at 0.6·0.5 = 0.3 → 10 µs. A vector op's FLOPs run on the
    vector units: 5e8/5e13 = 10 µs."""
    grouped = Op("e", "matrix", "fwd", 4e9, 0.0, "bf16", 4, groups=4)
    assert compute_time_s(grouped, DEV, CAL) == pytest.approx(10e-6)
    assert op_time_s(grouped, DEV, CAL) == pytest.approx(10e-6 + 4 * 5e-6)
    assert compute_time_s(Op("f", "flash", "fwd", 3e9, 0.0, "bf16"), DEV, CAL) == pytest.approx(10e-6)
    assert compute_time_s(Op("v", "vector", "fwd", 5e8, 0.0, "fp32"), DEV, CAL) == pytest.approx(10e-6)
    assert compute_time_s(Op("z", "matrix", "fwd", 0.0, 1.0, "bf16"), DEV, CAL) == 0.0


def test_host_issue_time():
    """The host issues each kernel in host_dispatch_s = 2 µs: 3 kernels → 6 µs; a library's internal launches
    (host_kernels = 0) cost the host nothing."""
    assert host_time_s(Op("v", "vector", "fwd", 0.0, 1.0, "bf16", 3), CAL) == pytest.approx(6e-6)
    assert host_time_s(Op("v", "vector", "fwd", 0.0, 1.0, "bf16", 3, host_kernels=0), CAL) == 0.0


def test_power_cap_clock_fraction():
    """P − P_idle ∝ f² (cost.power): an H100 SXM (700 W rated, 120 W idle) capped at 600 W runs at
    √(480/580) = 0.90972 of its clock; at 410 W √(290/580) = √0.5 = 0.70711; no cap, an unknown rating or a cap
    at or above the rating: 1."""
    assert clock_fraction(700, 120, 600) == pytest.approx(math.sqrt(480 / 580))
    assert clock_fraction(700, 120, 410) == pytest.approx(math.sqrt(0.5))
    assert clock_fraction(700, 120, 0) == clock_fraction(0, 120, 600) == clock_fraction(700, 120, 800) == 1.0


def test_capped_device_scales_arithmetic_not_memory():
    """Capped at 410 W the matrix and vector peaks scale by √0.5 (1e15 → 7.0711e14), HBM bandwidth does not."""
    from narrowpath.catalog import system
    import dataclasses
    sysm = dataclasses.replace(system("dgx-h100"), device=DEV, power_limit_w=410.0)
    dev = capped_device(sysm)
    assert dev.peak_matrix_flop_per_s["bf16"] == pytest.approx(1e15 * math.sqrt(0.5))
    assert dev.peak_vector_flop_per_s["fp32"] == pytest.approx(5e13 * math.sqrt(0.5))
    assert dev.hbm.bw_bytes_per_s == 2e12
    assert capped_device(dataclasses.replace(sysm, power_limit_w=0.0)) is DEV


def test_flop_conventions_by_hand():
    """Narayanan et al. SC'21 eq. (3) with full recompute, 96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h)), and Korthikanti
    et al. §6 without, 72·B·s·l·h²·(1 + s/(6h) + V/(12·l·h)); B 1, s 2048, l 2, h 1024, V 1024:
    96·2048·2·1024²·(1 + 1/3 + 1/32) = 562,640,715,776 and 72·…·(1 + 1/3 + 1/24) = 425,201,762,304.
    MFU: 1e18 FLOPs in 10 s on 100 GPUs of 2e15 FLOP/s = 0.5."""
    assert narayanan_eq3_flop(1, 2048, 2, 1024, 1024) == pytest.approx(562_640_715_776)
    assert korthikanti_model_flop(1, 2048, 2, 1024, 1024) == pytest.approx(425_201_762_304)
    assert mfu(1e18, 10.0, 100, 2e15) == pytest.approx(0.5)


def test_flash_rate_by_head_width_is_cudnn_measured_by_flashattention3():
    """FlashAttention-3 (Shah et al. 2024) Figs. 5-6, cuDNN on H100 SXM5 at sequence 4k, TFLOP/s: forward 408 at head
    dim 64, 609 at 128, 581 at 256; backward 417 at 64, 499 at 128. Relative to 128: forward 0.670 / 1 / 0.954,
    backward 0.836 / 1 (not measured above 128: held). Halfway in log2 (head dim 90.5 = 2^6.5) the forward is
    (0.670 + 1)/2 = 0.835; MLA's 192 (log2 192 = 7 + 0.585) forward 1 − 0.585 · 0.046 = 0.973; beyond the measured range the ends hold."""
    assert flash_head_dim_rate(64, "fwd") == pytest.approx(408 / 609)
    assert flash_head_dim_rate(64, "bwd") == pytest.approx(417 / 499)
    assert flash_head_dim_rate(64, "recompute") == pytest.approx(408 / 609)  # a re-run forward
    assert flash_head_dim_rate(128, "fwd") == flash_head_dim_rate(128, "bwd") == 1.0
    assert flash_head_dim_rate(256, "fwd") == pytest.approx(581 / 609)
    assert flash_head_dim_rate(256, "bwd") == 1.0
    assert flash_head_dim_rate(2 ** 6.5, "fwd") == pytest.approx((408 / 609 + 1) / 2)
    assert flash_head_dim_rate(192, "fwd") == pytest.approx(1 + math.log2(1.5) * (581 / 609 - 1))
    assert flash_head_dim_rate(32, "bwd") == flash_head_dim_rate(64, "bwd")
    assert flash_head_dim_rate(576, "fwd") == flash_head_dim_rate(256, "fwd")
    assert flash_head_dim_rate(0, "fwd") == 1.0  # no head width: the calibrated rate as it is


def test_a_narrow_head_slows_a_compute_bound_flash_kernel_by_its_measured_rate():
    """A 1 TFLOP flash forward (compute-bound: 1 MB of traffic) on the round device: peak 1e15 × ramp 0.8·1e12/(1e12 +
    1e9) × flash 0.5 → 2.5025 ms at the calibrated (forward + backward) rate, for an op without a head width; a tiled
    kernel's forward runs f = (1 + 2.5·609/499)/3.5 = 1.1575 times faster (FLASH_BWD_PER_FWD = 499/609): 2.1621 ms at
    head dim 128; at head dim 64 at 408/609 of that rate: 3.2272 ms; its backward (2.5 TFLOP) at 417/499 of the
    backward's rate f·499/609."""
    f = (1 + 2.5 * 609 / 499) / 3.5
    eff = 0.8 * 1e12 / (1e12 + 1e9) * 0.5
    t_none = compute_time_s(Op("flash_attn", "flash", "fwd", 1e12, 1e6, "bf16"), DEV, CAL)
    assert t_none == pytest.approx(1e12 / (1e15 * eff))
    t128 = compute_time_s(Op("flash_attn", "flash", "fwd", 1e12, 1e6, "bf16", head_dim=128.0), DEV, CAL)
    assert t128 == pytest.approx(1e12 / (1e15 * eff * f)) == pytest.approx(2.16208e-3, rel=1e-5)
    t64 = compute_time_s(Op("flash_attn", "flash", "fwd", 1e12, 1e6, "bf16", head_dim=64.0), DEV, CAL)
    assert t64 == pytest.approx(t128 * 609 / 408)
    b64 = compute_time_s(Op("flash_attn", "flash", "bwd", 2.5e12, 2.5e6, "bf16", head_dim=64.0), DEV, CAL)
    eff_b = 0.8 * 2.5e12 / (2.5e12 + 1e9) * 0.5
    assert b64 == pytest.approx(2.5e12 / (1e15 * eff_b * f * 499 / 609) * 499 / 417)
    # a GEMM is not a tiled attention kernel: a head width on it changes nothing
    g = Op("qkv", "matrix", "fwd", 1e12, 1e6, "bf16")
    assert compute_time_s(g, DEV, CAL) == compute_time_s(dataclasses.replace(g, head_dim=64.0), DEV, CAL)


def test_a_fused_attention_forward_and_its_backward_take_the_calibrated_time_together():
    """The calibration's flash rate is fitted on whole training steps: split into the forward's and the backward's
    (499/609 per FLOP), one forward of F and its backward of 2.5·F still take 3.5·F at that rate. A forward-only
    pass (prefill, a recomputed forward) runs at the forward's rate; a kernel without a head width (decode attention)
    keeps the calibrated rate."""
    from narrowpath.cost.roofline import FLASH_BWD_PER_FWD, flash_phase_rate
    assert FLASH_BWD_PER_FWD == pytest.approx(499 / 609)
    assert flash_phase_rate("bwd") / flash_phase_rate("fwd") == pytest.approx(499 / 609)
    assert 1 / flash_phase_rate("fwd") + 2.5 / flash_phase_rate("bwd") == pytest.approx(3.5)
    assert flash_phase_rate("recompute") == flash_phase_rate("fwd") == pytest.approx(1.15746, rel=1e-4)
    F = 4e12  # both passes on the same FLOPs: the same size ramp
    fwd = Op("flash_attn", "flash", "fwd", F, 1e6, "bf16", head_dim=128.0)
    bwd = Op("flash_attn", "flash", "bwd", F, 1e6, "bf16", head_dim=128.0)
    plain = Op("attn_decode", "flash", "fwd", F, 1e6, "bf16")
    t_plain = compute_time_s(plain, DEV, CAL)
    assert compute_time_s(fwd, DEV, CAL) + 2.5 * compute_time_s(bwd, DEV, CAL) == pytest.approx(3.5 * t_plain)
    # a forward that waits on its exponentials gains the forward's factor there too, the backward (tensor-bound)
    # loses its own: the pair is faster than the fitted time. Round device with SFUs at 1e12 exp/s, 128-wide head,
    # 1 exponential per 512 forward FLOPs: forward exp-bound at F/512/(1e12·e·f), backward tensor-bound at
    # F/(1e15·e·0.948); the pair takes 0.971 of its time at one rate for both passes
    e = 0.8 * F / (F + 1e9) * 0.5
    f = (1 + 2.5 * 609 / 499) / 3.5
    sfu = dataclasses.replace(DEV, peak_exp_per_s=1e12)
    fwd_e = dataclasses.replace(fwd, exps=F / 512)
    bwd_e = dataclasses.replace(bwd, exps=F / 512 / 2.5)  # the same scores over 2.5x the FLOPs of a real backward
    assert compute_time_s(fwd_e, sfu, CAL) == pytest.approx(F / 512 / (1e12 * e * f))
    assert compute_time_s(bwd_e, sfu, CAL) == pytest.approx(F / (1e15 * e * f * 499 / 609))
    pair = compute_time_s(fwd_e, sfu, CAL) + 2.5 * compute_time_s(bwd_e, sfu, CAL)
    before = F / 512 / (1e12 * e) + 2.5 * F / (1e15 * e)  # one rate for both passes
    assert pair < before and pair == pytest.approx(before * 0.97088, rel=1e-4)
    # any head width makes a tiled kernel: one below the table's first point (held at 64's rate) splits too
    narrowest = dataclasses.replace(fwd, head_dim=1.0)
    assert compute_time_s(narrowest, DEV, CAL) == pytest.approx(
        compute_time_s(dataclasses.replace(fwd, head_dim=64.0), DEV, CAL))


def test_a_flash_kernel_waits_on_its_exponentials_where_the_sfus_are_slower():
    """One exponential per score. The round device with 2e12 exp/s: a 64-wide forward of 1 TFLOP over 1e12/256 =
    3.90625e9 scores (2·(64 + 64) FLOPs each). At the kernel's forward efficiency e = 0.8·1e12/(1e12 + 1e9)·0.5·1.1575
    its tensor cores need 1e12/(1e15·e·408/609) = 3.227 ms, its exponentials 3.90625e9/(2e12·e) = 4.2228 ms: the
    kernel takes the exponentials' time. A device that does not rate them (0) keeps the tensor-core time; so does a kernel that
    computes no scores."""
    e = 0.8 * 1e12 / (1e12 + 1e9) * 0.5 * (1 + 2.5 * 609 / 499) / 3.5  # at the forward's rate (flash_phase_rate)
    fa = Op("flash_attn", "flash", "fwd", 1e12, 1e6, "bf16", head_dim=64.0, exps=1e12 / 256)
    sfu = dataclasses.replace(DEV, peak_exp_per_s=2e12)
    assert compute_time_s(fa, sfu, CAL) == pytest.approx(1e12 / 256 / (2e12 * e))
    assert compute_time_s(fa, DEV, CAL) == pytest.approx(1e12 / (1e15 * e * 408 / 609))
    assert compute_time_s(dataclasses.replace(fa, exps=0.0), sfu, CAL) == compute_time_s(fa, DEV, CAL)
    fast = dataclasses.replace(DEV, peak_exp_per_s=8e12)  # SFUs 4x faster: the tensor cores bind again
    assert compute_time_s(fa, fast, CAL) == compute_time_s(fa, DEV, CAL)


def test_exponential_rates_follow_each_generation_sm():
    """16 exp2 per clock per SM (CUDA C++ Programming Guide) against the dense BF16 tensor FLOPs of one SM per clock —
    A100 2,048, H100 4,096, Blackwell 8,192 — so the SFUs deliver one exponential per 128, 256 and 512 tensor FLOPs;
    Blackwell Ultra doubles the SFU rate: one per 256. The rates scale with a power cap's clock."""
    from narrowpath.catalog import device, system
    from narrowpath.cost.power import capped_device
    for name, flops_per_exp in (("A100-SXM4-80GB", 128), ("H100-SXM5-80GB", 256), ("H200-SXM-141GB", 256),
                                ("B200", 512), ("GB200", 512), ("B300", 256), ("GB300", 256)):
        d = device(name)
        assert d.peak_exp_per_s == pytest.approx(d.matrix_peak("bf16") / flops_per_exp, rel=1e-4), name
    assert device("MI300X").peak_exp_per_s == 0.0  # not rated: no bound
    capped = dataclasses.replace(system("dgx-b200"), power_limit_w=600.0)
    d = capped_device(capped)
    assert d.peak_exp_per_s / device("B200").peak_exp_per_s == pytest.approx(
        d.matrix_peak("bf16") / device("B200").matrix_peak("bf16"))


def test_on_blackwell_a_narrow_head_waits_on_its_exponentials_and_blackwell_ultra_lifts_it():
    """A 64-wide flash forward (4·64 = 256 tensor FLOPs per score): on B200 one exponential per 512 tensor FLOPs, so
    its exponentials take 2x its tensor-core work at the same efficiency — more than the measured 64-wide slowdown
    (609/408 = 1.49x): exp-bound. On B300 (one per 256) they take 1x: the tensor cores (1.49x) bind. A 128-wide head
    balances on B200 (1x): nothing changes there. Same work and calibration on both parts."""
    from narrowpath.catalog import calibration_for, device
    cal = calibration_for("B200")
    fa = Op("flash_attn", "flash", "fwd", 1e13, 1e6, "bf16", head_dim=64.0, exps=1e13 / 256)
    mma_only = compute_time_s(dataclasses.replace(fa, exps=0.0), device("B200"), cal)
    assert compute_time_s(fa, device("B200"), cal) == pytest.approx(mma_only * 2 * 408 / 609, rel=1e-4)  # 4.3945e12
    assert compute_time_s(fa, device("B300"), cal) == pytest.approx(mma_only)
    wide = dataclasses.replace(fa, head_dim=128.0, exps=1e13 / 512)
    assert compute_time_s(wide, device("B200"), cal) == pytest.approx(
        compute_time_s(dataclasses.replace(wide, exps=0.0), device("B200"), cal), rel=1e-4)


def test_flash_rates_hold_their_ends_and_exponentials_count_from_one():
    """Below the narrowest measured head (64) the rate stays at 64's: a 1-wide or half-wide head is not the profile's
    128-wide kernel. One exponential on a device rated 2e12/s at efficiency 0.5 takes 1/(2e12·0.5) = 1 ps, and on a
    (silly) device rated 1 exponential a second 2 of them at 0.5 take 4 s: any positive rate bounds, 0 means unrated."""
    assert flash_head_dim_rate(1, "fwd") == flash_head_dim_rate(0.5, "fwd") == pytest.approx(408 / 609)
    assert flash_head_dim_rate(1, "bwd") == pytest.approx(417 / 499)
    from narrowpath.cost.roofline import exp_time_s
    assert exp_time_s(1.0, dataclasses.replace(DEV, peak_exp_per_s=2e12), 0.5) == pytest.approx(1e-12, rel=1e-9,
                                                                                                 abs=0.0)
    assert exp_time_s(2.0, dataclasses.replace(DEV, peak_exp_per_s=1.0), 0.5) == pytest.approx(4.0)
    assert exp_time_s(2.0, DEV, 0.5) == 0.0
