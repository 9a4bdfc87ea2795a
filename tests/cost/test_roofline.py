"""Roofline op time: the size ramp, measured efficiency tables from `narrowpath calibrate`, and provenance."""
from __future__ import annotations

import dataclasses

import pytest

from narrowpath.catalog import calibration_for, device, load_scenario
from narrowpath.cost.roofline import matrix_efficiency, op_time_s, table_efficiency
from narrowpath.schedule import predict
from narrowpath.workload.transformer import gemm

POINTS = ((1e8, 0.2), (1e10, 0.6), (1e12, 0.8))


def test_table_is_interpolated_in_log_size_and_flat_beyond():
    assert table_efficiency(1e9, POINTS) == pytest.approx(0.4)
    assert table_efficiency(1e13, POINTS) == pytest.approx(0.8)
    # below the smallest measured size the time stays that of the smallest GEMM (latency-bound)
    assert 1e7 / table_efficiency(1e7, POINTS) == pytest.approx(1e8 / 0.2)


def test_ramp_is_monotone_and_saturates():
    cal = calibration_for("A100-SXM4-80GB")
    effs = [matrix_efficiency(f, "fp16", cal) for f in (1e6, 1e8, 1e10, 1e12, 1e14)]
    assert effs == sorted(effs) and effs[-1] == pytest.approx(cal.matrix_eff("fp16"), rel=1e-3)


def test_op_time_is_the_larger_roof_plus_overhead():
    cal, dev = calibration_for("H100-SXM5-80GB"), device("H100-SXM5-80GB")
    op = gemm("g", "fwd", 8192, 8192, 8192, "bf16", 2, 2)
    compute = op.flop / (dev.matrix_peak("bf16") * matrix_efficiency(op.flop, "bf16", cal))
    assert op_time_s(op, dev, cal) == pytest.approx(compute + cal.kernel_overhead_s)
    thin = gemm("thin", "fwd", 8192, 8192, 8, "bf16", 2, 2)  # a GEMV-like shape is memory-bound
    assert op_time_s(thin, dev, cal) == pytest.approx(
        thin.hbm_bytes / (dev.hbm.bw_bytes_per_s * cal.vector_bw_efficiency) + cal.kernel_overhead_s)


def test_a_gemm_of_fewer_rows_than_one_mma_tile_is_a_weight_stream():
    """A decode step of one token against Llama-2 7B's qkv slice at tp 8 ([1 × 4096]·[4096 × 1536], bf16): 12.6
    MFLOP and 4096·1536·2 = 12.58 MB of weights. Priced on the size ramp it would take F_half / (peak · eff) ≈ 11 µs on
    H100 whatever its size; as a weight stream it takes its bytes over the bandwidth, (12.58 MB + the 8 KB input
    and 3 KB output) / (3.35 TB/s · eff_bw), plus the kernel overhead. At 64 rows (one wgmma tile) the ramp applies
    again."""
    from narrowpath.cost.roofline import MMA_TILE_ROWS, compute_time_s
    cal, dev = calibration_for("H100-SXM5-80GB"), device("H100-SXM5-80GB")
    op = gemm("qkv", "fwd", 1, 4096, 1536, "bf16", 2, 2)
    assert op.rows == 1 and op.hbm_bytes == 4096 * 2 + 4096 * 1536 * 2 + 1536 * 2
    stream = op.hbm_bytes / (dev.hbm.bw_bytes_per_s * cal.vector_bw_efficiency)
    assert op_time_s(op, dev, cal) == pytest.approx(stream + cal.kernel_overhead_s)
    assert compute_time_s(op, dev, cal) == pytest.approx(op.flop / (dev.matrix_peak("bf16") * cal.matrix_eff("bf16")))
    tile = gemm("qkv", "fwd", MMA_TILE_ROWS, 4096, 1536, "bf16", 2, 2)
    ramp = tile.flop / (dev.matrix_peak("bf16") * matrix_efficiency(tile.flop, "bf16", cal))
    assert ramp > 5e-6 and op_time_s(tile, dev, cal) == pytest.approx(max(ramp, tile.hbm_bytes / (
        dev.hbm.bw_bytes_per_s * cal.vector_bw_efficiency)) + cal.kernel_overhead_s)
    # a grouped GEMM counts the rows of one group: 8 experts × 16 tokens each is a stream, 8 × 64 is not
    assert gemm("e", "fwd", 128, 4096, 1024, "bf16", 2, 2, groups=8).rows == 16


def test_measured_table_drives_the_prediction_and_is_reported():
    """A calibrated profile with a lower measured GEMM table makes the step slower and says it was used."""
    scn = load_scenario("llama3-8b-h100-8")
    base = predict(scn)
    cal = dataclasses.replace(calibration_for("H100-SXM5-80GB"), name="measured",
                              matrix_efficiency_by_size={"bf16": ((1e9, 0.2), (1e12, 0.4))})
    slow = predict(scn, cal)
    assert slow.step_time_s > base.step_time_s * 1.15  # GEMMs at <= 0.40 instead of up to the profile's 0.55
    assert any("measured table (2 sizes" in a for a in slow.assumptions)
    assert any(f"eff_max {calibration_for('H100-SXM5-80GB').matrix_eff('bf16'):.2f}" in a for a in base.assumptions)
