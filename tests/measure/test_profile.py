"""A fitted profile round-trips through `calibration_from` and moves predictions the expected way."""
from __future__ import annotations

import dataclasses

import pytest
import yaml

from narrowpath.catalog.resolve import calibration_from
from narrowpath.measure.profile import build_profile, profile_document, tier_points_from_log
from narrowpath.measure.nccl_tests import parse_nccl_tests_log_full


def _compute(eff_large: float, peak: float = 989.4e12) -> dict:
    """A synthetic GEMM sweep on the H100 ramp form with the given large-GEMM efficiency."""
    rows = []
    for n in (1024, 2048, 4096, 8192, 16384):
        flop = 2.0 * n ** 3
        rate = eff_large * peak * flop / (flop + 6e9)
        rows.append({"backend": "torch-cuda", "device": "NVIDIA H100 80GB HBM3", "dtype": "bf16", "m": n, "n": n,
                     "k": n, "flop": flop, "time_s": flop / rate, "flops_per_s": rate, "repeats": 5})
    return {"probe": "compute", "samples": rows, "peaks": {}}


def _write(tmp_path, eff: float, nccl_log: str | None = None):
    points = [tier_points_from_log(parse_nccl_tests_log_full(nccl_log), tier="scale_up", op=None, num_ranks=None,
                                   name="log")] if nccl_log else []
    rep = build_profile(name=f"H100-SXM5-80GB-eff{eff}", device="H100-SXM5-80GB", compute=_compute(eff),
                        peaks={"bf16": 989.4e12}, tier_points=points, line_rates={"scale_up": 300e9})
    path = tmp_path / f"profile-{eff}.yaml"
    path.write_text(yaml.safe_dump(profile_document(rep.profile), sort_keys=False))
    return path, rep


def test_fit_recovers_the_ramp(tmp_path):
    _, rep = _write(tmp_path, 0.7)
    assert rep.profile["matrix_efficiency"]["bf16"] == pytest.approx(0.7, abs=1e-3)
    assert rep.profile["matrix_half_flop"] == pytest.approx(6e9, rel=1e-2)
    assert rep.profile["fit_residuals"]["matrix_efficiency.bf16"] < 1e-6


def test_round_trip_through_calibration_from(tmp_path, nccl_log_text):
    """The written file loads; the tier comes from the nccl-tests log's plateau and α-β fit."""
    path, rep = _write(tmp_path, 0.7, nccl_log_text)
    cal = calibration_from(str(path))
    assert cal.name == "H100-SXM5-80GB-eff0.7"
    assert cal.matrix_eff("bf16") == pytest.approx(0.7, abs=1e-3)
    assert dict(cal.matrix_efficiency_by_size)["bf16"][0][0] == pytest.approx(2.0 * 1024 ** 3)
    up = cal.tier("scale_up")
    # plateau = median busbw of the sizes >= 1/8 of the largest (16 MiB and 128 MiB here), of 300 GB/s
    assert up.bw_efficiency == pytest.approx((179.13 + 233.39) / 2 / 300, rel=2e-3)
    assert up.alpha_s > 0 and up.measured_num_ranks == 8 and up.busbw_efficiency_by_size
    assert "tiers.scale_up.all_reduce" in cal.fit_residuals


def test_lower_efficiency_predicts_a_slower_step(tmp_path):
    """Same scenario, profile with 0.4 instead of 0.8 matrix efficiency: the predicted step is slower."""
    step = pytest.importorskip("narrowpath.schedule.step")
    from narrowpath.catalog import load_scenario
    scen = load_scenario("llama3-8b-h100-8")
    fast = calibration_from(str(_write(tmp_path, 0.8)[0]))
    slow = calibration_from(str(_write(tmp_path, 0.4)[0]))
    t_fast = step.predict(dataclasses.replace(scen, calibration=fast)).step_time_s
    t_slow = step.predict(dataclasses.replace(scen, calibration=slow)).step_time_s
    assert t_slow > 1.2 * t_fast


def test_memory_levels_enter_the_profile(tmp_path, memory_result):
    rep = build_profile(name="cpu", device="cpu", memory=memory_result)
    path = tmp_path / "cpu.yaml"
    path.write_text(yaml.safe_dump(profile_document(rep.profile)))
    cal = calibration_from(str(path))
    assert [lv.name for lv in cal.memory_levels] == [lv["name"] for lv in memory_result["levels"]]
    assert cal.memory_levels[0].bw_bytes_per_s > cal.memory_levels[-1].bw_bytes_per_s


def test_base_profile_supplies_unmeasured_figures(tmp_path, nccl_log_text):
    """With the shipped profile as base, only the measured tier changes; the rest is the base's."""
    base = calibration_from("A100-SXM4-80GB")
    points = [tier_points_from_log(parse_nccl_tests_log_full(nccl_log_text), tier="scale_up", op=None,
                                   num_ranks=None, name="log")]
    rep = build_profile(name="A100-mine", device="A100-SXM4-80GB", tier_points=points, base=base,
                        line_rates={"scale_up": 300e9})
    path = tmp_path / "a100.yaml"
    path.write_text(yaml.safe_dump(profile_document(rep.profile)))
    cal = calibration_from(str(path))
    assert dict(cal.matrix_efficiency) == dict(base.matrix_efficiency)
    assert cal.tier("scale_out") == base.tier("scale_out")
    assert cal.tier("scale_up").bw_efficiency != base.tier("scale_up").bw_efficiency
