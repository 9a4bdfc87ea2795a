"""The energy account and the ledger for the block-scaled training formats and under a power cap (a review found
MXFP8 / NVFP4 matrix multiplies charged 0 J — their coefficient looked up under the format's own name — and their
on-chip operands counted at 2 bytes an element; and a capped board charged its rated energy per FLOP, averaging
more power than its cap allows)."""
from __future__ import annotations

import math

import pytest

from narrowpath.analysis import analyze
from narrowpath.analysis.energy import pj_per_flop
from narrowpath.catalog import device
from tests.analysis.conftest import scenario_from_flags


def _b200(precision: str):
    return analyze(scenario_from_flags(["--model", "llama3-8b", "--system", "dgx-b200", "--gpus", "8",
                                        "--precision", precision]))


def test_block_scaled_formats_take_their_element_types_coefficients():
    """B200's catalog rates FP8 at 0.3 pJ/FLOP and has no FP4 entry: MXFP8 runs on the FP8 units; NVFP4 on the FP4
    units at twice FP8's rate (9 against 4.5 PFLOP/s), so at half FP8's energy a FLOP, 0.15 — the catalog's own
    derivation, (TDP − idle − HBM power) / sustained rate, which B300's stated FP4 follows (0.13 against FP8's
    0.39 at three times the rate); a device without an FP4 rate (H100) runs it at FP8's."""
    b200 = device("B200")
    assert pj_per_flop(b200.energy_pj_per_flop, "mxfp8", b200) == 0.3
    assert pj_per_flop(b200.energy_pj_per_flop, "nvfp4", b200) == pytest.approx(0.15)
    assert pj_per_flop(device("B300").energy_pj_per_flop, "nvfp4", device("B300")) == 0.13
    h100 = device("H100-SXM5-80GB")
    assert pj_per_flop(h100.energy_pj_per_flop, "nvfp4", h100) == h100.energy_pj_per_flop["fp8"]
    fp8, mx, nv = (_b200(p) for p in ("fp8", "mxfp8", "nvfp4"))
    for a in (mx, nv):
        assert not any(m.startswith("pj_per_flop") for m in a.energy.missing)
    # the same GEMMs at the same coefficient: the arithmetic energy of the FP8 run, to the casts' share
    assert mx.energy.flop_j == pytest.approx(fp8.energy.flop_j, rel=0.02)
    assert mx.energy.flop_j > 2 * fp8.energy.flop_j / 3  # was a third: the vector ops alone
    assert fp8.energy.flop_j / 3 < nv.energy.flop_j < 0.75 * fp8.energy.flop_j  # FP4 GEMMs at half FP8's


def test_on_chip_bytes_follow_the_element_width():
    """An NVFP4 operand is half a byte, MXFP8's one: the register/shared-memory and L2 traffic of the GEMMs falls
    with the width (the ledger once charged both 2 bytes, NVFP4 above BF16's)."""
    rows = {p: {r.level: r.bytes_per_step for r in _b200(p).data_movement} for p in ("bf16", "fp8", "mxfp8", "nvfp4")}
    for lv in ("sram", "l2"):
        assert rows["nvfp4"][lv] < rows["fp8"][lv] < rows["bf16"][lv]
        assert rows["mxfp8"][lv] == pytest.approx(rows["fp8"][lv], rel=0.02)


def test_a_power_cap_lowers_the_energy_per_flop_with_the_clock(tmp_path):
    """H100 SXM capped at 400 W (idle 120 W, rated 700 W): clock f = √(280 / 580) = 0.695 (cost.power), dynamic
    power ∝ f² over a rate ∝ f: the same FLOPs cost f of their rated energy, and the board averages under its cap."""
    base = tmp_path / "base.yaml"
    capped = tmp_path / "capped.yaml"
    plan = ("plan: {tp: 1, pp: 1, dp: 8, mbs: 1, gbs: 64, zero_stage: 3, recompute: full, precision: bf16, "
            "dp_overlap: true}\n")
    base.write_text("hardware: {gpu: H100-SXM5-80GB, num_gpus: 8}\nmodel: llama3-8b\nnum_gpus: 8\n" + plan)
    capped.write_text("hardware: {gpu: H100-SXM5-80GB, num_gpus: 8, power_limit_w: 400}\nmodel: llama3-8b\n"
                      "num_gpus: 8\n" + plan)
    a, b = analyze(scenario_from_flags([str(base)])), analyze(scenario_from_flags([str(capped)]))
    dev = device("H100-SXM5-80GB")
    f = math.sqrt((400 - dev.idle_w) / (dev.tdp_w - dev.idle_w))
    assert f == pytest.approx(0.695, abs=1e-3)
    assert b.prediction.hardware_flop_per_step == a.prediction.hardware_flop_per_step
    assert b.energy.flop_j == pytest.approx(a.energy.flop_j * f, rel=1e-9)
    assert b.energy.avg_power_per_gpu_w < 400 < a.energy.avg_power_per_gpu_w
