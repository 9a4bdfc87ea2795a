"""`narrowpath calibrate` never writes what `--profile` refuses and never fits a measurement "as" something it
is not: a host CPU's GEMM sweep is refused for a GPU --device (with the reason), an empty result is refused,
rates far above the peak are refused (slightly above: clipped with a warning), and a profile file with an unknown
`schema:` or duplicate ids does not load."""
from __future__ import annotations

import json

import pytest
import yaml

from narrowpath.catalog.resolve import calibration_from
from narrowpath.cli.main import main
from narrowpath.errors import SpecError
from tests.cli.one_line import one_line_error


def cpu_compute(rate_scale: float = 1.0, peak: float = 100e9) -> dict:
    """A host GEMM sweep (numpy backend) on the ramp form, with its estimated CPU peak."""
    rows = []
    for n in (256, 512, 1024):
        flop = 2.0 * n ** 3
        rate = rate_scale * 0.6 * peak * flop / (flop + 1e7)
        rows.append({"backend": "numpy", "device": "Some CPU @ 2.0GHz", "dtype": "fp32", "m": n, "n": n, "k": n,
                     "flop": flop, "time_s": flop / rate, "flops_per_s": rate, "repeats": 3})
    return {"probe": "compute", "device": "Some CPU @ 2.0GHz", "samples": rows,
            "peaks": {"fp32": {"peak_flops_per_s": peak, "reason": "estimate"}}}


@pytest.fixture
def probe_json(tmp_path):
    def write(result: dict, name: str = "probe.json"):
        f = tmp_path / name
        f.write_text(json.dumps(result))
        return f
    return write


def test_readme_line_fits_this_machines_profile(tmp_path, probe_json, capsys):
    """`calibrate probe.json -o my.yaml` on a CPU probe: a profile that loads back."""
    out = tmp_path / "my.yaml"
    assert main(["calibrate", str(probe_json({"probe": "all", "compute": cpu_compute()})), "-o", str(out)]) == 0
    assert calibration_from(str(out)).matrix_eff("fp32") == pytest.approx(0.6, rel=1e-3)


def test_a_cpu_probe_fitted_as_an_a100_is_refused_with_the_reason(tmp_path, probe_json, capsys):
    out = tmp_path / "my.yaml"
    err = one_line_error(capsys, ["calibrate", str(probe_json(cpu_compute())), "--device", "A100-SXM4-80GB",
                                  "-o", str(out)],
                         "--device A100-SXM4-80GB", "host CPU (Some CPU @ 2.0GHz, numpy)", "of the A100-SXM4-80GB's peak",
                         "drop --device")
    assert not out.exists(), err


def test_tiny_efficiencies_keep_significant_figures():
    """A real GPU probe at 0.002 % of the peak (a broken run) must still give a profile that loads, not 0.0."""
    from narrowpath.measure.profile import build_profile
    comp = cpu_compute()
    for s in comp["samples"]:
        s["backend"] = "torch-cuda"
    rep = build_profile(name="x", device="A100-SXM4-80GB", compute=comp, peaks={"fp32": 19.5e12 * 1e4})
    eff = rep.profile["matrix_efficiency"]["fp32"]
    assert 0 < eff < 1e-4 and all(p[1] > 0 for p in rep.profile["matrix_efficiency_by_size"]["fp32"])


@pytest.mark.parametrize("content, fragment", [
    ({}, "not a narrowpath probe result (no `probe` key"),
    ({"probe": "all"}, "nothing to fit"),
    ({"foo": 1}, "probe = None"),
])
def test_empty_results_are_refused(tmp_path, probe_json, capsys, content, fragment):
    out = tmp_path / "p.yaml"
    one_line_error(capsys, ["calibrate", str(probe_json(content)), "-o", str(out)], fragment)
    assert not out.exists()


def test_rates_far_above_the_peak_are_refused(tmp_path, probe_json, capsys):
    out = tmp_path / "p.yaml"
    one_line_error(capsys, ["calibrate", str(probe_json(cpu_compute(rate_scale=1e9))), "-o", str(out)],
                   "matrix_efficiency.fp32: measured", "x the peak")
    assert not out.exists()


def test_rates_a_little_above_the_peak_are_clipped_with_a_warning(tmp_path, probe_json, capsys):
    out = tmp_path / "p.yaml"
    assert main(["calibrate", str(probe_json(cpu_compute(rate_scale=2.0))), "-o", str(out)]) == 0
    err = capsys.readouterr().err
    assert "warning: matrix_efficiency.fp32: measured 1.2" in err and "clipped to 1" in err
    assert calibration_from(str(out)).matrix_eff("fp32") == 1.0


def test_memory_probe_is_left_out_for_a_device(tmp_path, probe_json, capsys, memory_result):
    """The memory probe measures host DRAM: with --device it is not the device's HBM, so it is left out (said)."""
    out = tmp_path / "p.yaml"
    one_line_error(capsys, ["calibrate", str(probe_json(memory_result)), "--device", "H100-SXM5-80GB", "-o", str(out)],
                   "nothing left to fit", "memory probe of the host left out: it measures host memory")
    assert main(["calibrate", str(probe_json({"probe": "all", "memory": memory_result, "compute": {
        **cpu_compute(), "samples": [{**s, "backend": "torch-cuda"} for s in cpu_compute()["samples"]]}})),
        "--device", "H100-SXM5-80GB", "-o", str(out)]) == 0
    assert "warning: memory probe of the host left out" in capsys.readouterr().err
    assert calibration_from(str(out)).memory_levels == ()


@pytest.mark.parametrize("doc, fragment", [
    ({"schema": "narrowpath-calibration/9", "profiles": [{"id": "a", "device": "H100-SXM5-80GB"}]},
     "calibration.schema: "),
    ({"schema": "narrowpath-calibration/1", "profiles": [{"id": "a", "device": "H100-SXM5-80GB"},
                                                         {"id": "a", "device": "A100-SXM4-80GB"}]},
     "duplicate profile id 'a'"),
])
def test_profile_file_schema_and_ids(tmp_path, capsys, doc, fragment):
    f = tmp_path / "prof.yaml"
    f.write_text(yaml.safe_dump(doc))
    with pytest.raises(SpecError, match=fragment):
        calibration_from(str(f))
    one_line_error(capsys, ["predict", "--profile", str(f)], fragment)


def test_fp64_gemms_of_a_cpu_probe_are_left_out_and_said(tmp_path, probe_json, capsys):
    """A CPU-only probe times NumPy fp64 too; a profile has no fp64 format, so fp64 is left out (sources, stderr),
    not refused: the fp32 fit is written."""
    comp = cpu_compute()
    comp["samples"] += [{**s, "dtype": "fp64", "flops_per_s": s["flops_per_s"] / 2} for s in comp["samples"]]
    comp["peaks"]["fp64"] = {"peak_flops_per_s": 50e9, "reason": "estimate"}
    out = tmp_path / "my.yaml"
    assert main(["calibrate", str(probe_json(comp)), "--name", "my-cpu", "-o", str(out)]) == 0
    assert "warning: matrix_efficiency: fp64 GEMMs left out" in capsys.readouterr().err
    cal = calibration_from(str(out))
    assert cal.matrix_eff("fp32") == pytest.approx(0.6, rel=1e-3) and "fp64" not in cal.matrix_efficiency
    assert "fp64 GEMMs measured but not written" in cal.sources["matrix_efficiency.left_out"]


def gloo_collectives() -> dict:
    """A 2-rank all_reduce sweep over host loopback: alpha 50 us, busbw 1 GB/s."""
    rows = [{"op": "all_reduce", "size_bytes": s, "time_s": 2 * 50e-6 + s / 1e9} for s in (1e3, 1e4, 1e5, 1e6, 1e7)]
    return {"probe": "collectives", "tier": "scale_up", "num_ranks": 2, "backend": "gloo", "device": "Some CPU",
            "samples": rows}


def test_a_tier_without_a_line_rate_is_not_reported_as_written(tmp_path, probe_json, capsys):
    """No --line-rate/--system: the tier cannot be written. Alone it leaves nothing to write (refused, naming the
    flag; it used to exit 0 with an empty profile listing five tier fits); beside a compute probe the profile is
    written, the tier's fits listed apart as not written, and stderr names the flag."""
    out = tmp_path / "m.yaml"
    one_line_error(capsys, ["calibrate", str(probe_json(gloo_collectives())), "--name", "mycpu", "-o", str(out)],
                   "nothing to write", "tiers.scale_up not written: no line rate", "--line-rate scale_up=")
    assert not out.exists()
    both = probe_json({"probe": "all", "compute": cpu_compute(), "collectives": gloo_collectives()}, "all.json")
    assert main(["calibrate", str(both), "--name", "mycpu", "-o", str(out)]) == 0
    got = capsys.readouterr()
    assert "warning: tiers.scale_up not written: no line rate" in got.err and "--line-rate scale_up=" in got.err
    written, _, left = got.out.partition("measured but not written")
    assert "matrix_efficiency.fp32" in written and "tiers." not in written and "tiers.scale_up.all_reduce" in left
    cal = calibration_from(str(out))
    assert not cal.tiers and not any(k.startswith("tiers.") for k in cal.fit_residuals)
    assert main(["calibrate", str(both), "--line-rate", "scale_up=2e9", "-o", str(out)]) == 0
    assert "not written" not in capsys.readouterr().out and calibration_from(str(out)).tier("scale_up")
