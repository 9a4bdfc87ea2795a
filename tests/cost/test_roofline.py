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
    MFLOP and 4096·1536·2 = 12.58 MB of weights. On the size ramp alone it would take F_half / (peak · eff) ≈ 11 µs
    on H100 whatever its size; as a weight stream its arithmetic is 1/64 of the 64-row GEMM's (the ramp read at
    64·F) and the time is its bytes over the bandwidth, (12.58 MB + the 8 KB input and 3 KB output) /
    (3.35 TB/s · eff_bw), plus the kernel overhead."""
    from narrowpath.cost.roofline import MMA_TILE_ROWS, compute_time_s
    cal, dev = calibration_for("H100-SXM5-80GB"), device("H100-SXM5-80GB")
    op = gemm("qkv", "fwd", 1, 4096, 1536, "bf16", 2, 2)
    assert op.rows == 1 and op.hbm_bytes == 4096 * 2 + 4096 * 1536 * 2 + 1536 * 2
    stream = op.hbm_bytes / (dev.hbm.bw_bytes_per_s * cal.vector_bw_efficiency)
    assert op_time_s(op, dev, cal) == pytest.approx(stream + cal.kernel_overhead_s)
    tile = gemm("qkv", "fwd", MMA_TILE_ROWS, 4096, 1536, "bf16", 2, 2)
    t64 = tile.flop / (dev.matrix_peak("bf16") * matrix_efficiency(tile.flop, "bf16", cal))
    assert t64 > 5e-6 and compute_time_s(op, dev, cal) == pytest.approx(t64 / MMA_TILE_ROWS)


def test_the_weight_stream_joins_the_ramp_without_a_step():
    """Time grows with the rows and does not jump at one tile: 63 rows take 63/64 of the 64-row GEMM's arithmetic
    (Llama-3 8B's 4096 × 1536 and 4096 × 512 slices on H100)."""
    from narrowpath.cost.roofline import compute_time_s
    cal, dev = calibration_for("H100-SXM5-80GB"), device("H100-SXM5-80GB")
    for n in (1536, 512):
        times = [op_time_s(gemm("g", "fwd", m, 4096, n, "bf16", 2, 2), dev, cal) for m in range(1, 200)]
        assert times == sorted(times)
        c63, c64 = (compute_time_s(gemm("g", "fwd", m, 4096, n, "bf16", 2, 2), dev, cal) for m in (63, 64))
        assert c63 == pytest.approx(c64 * 63 / 64)


def test_a_grouped_gemm_streams_by_its_rows_per_group():
    """8 experts × 16 tokens is 16 rows a group: a weight stream, priced as 1/4 of a one-tile group; 8 × 64 is not."""
    from narrowpath.cost.roofline import compute_time_s
    cal, dev = calibration_for("H100-SXM5-80GB"), device("H100-SXM5-80GB")
    few, full = gemm("e", "fwd", 128, 4096, 1024, "bf16", 2, 2, groups=8), gemm("e", "fwd", 512, 4096, 1024, "bf16",
                                                                                2, 2, groups=8)
    assert (few.rows, full.rows) == (16, 64)
    assert compute_time_s(few, dev, cal) == pytest.approx(compute_time_s(full, dev, cal) / 4)


def test_backward_and_recompute_keep_the_rows_of_their_forward():
    """dgrad multiplies the same m rows by the weights and a recompute re-runs the forward: both keep its rows (and
    so its price); wgrad reduces over the rows into a k × n output and stays on the ramp."""
    from narrowpath.workload.ops import as_phase, backward_ops
    fwd = gemm("gates", "fwd", 32, 1024, 4096, "bf16", 2, 2)
    dgrad, wgrad = backward_ops([fwd])
    (again,) = as_phase([fwd], "recompute")
    assert (dgrad.rows, wgrad.rows, again.rows) == (32, 0.0, 32)
    cal, dev = calibration_for("H100-SXM5-80GB"), device("H100-SXM5-80GB")
    assert op_time_s(again, dev, cal) == op_time_s(fwd, dev, cal)


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
