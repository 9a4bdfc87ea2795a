"""The GPU memory probe's level detection and what `calibrate` makes of memory probes on a GPU machine. The probe
itself needs CUDA (checked on the project's device machine: benchmarks/data/h200/probe_memory_gpu.json)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from narrowpath.measure.gpu_memory_probe import detect_gpu_levels
from narrowpath.measure.memory_probe import working_set_sizes

DATA = Path(__file__).resolve().parents[2] / "benchmarks" / "data" / "h200"


FIXED_S = 1e-6


def _samples(l2_bytes: float, l2_bw: float, hbm_bw: float, max_bytes: float = 4 * 2**30):
    """A staircase: the add kernel at L2 bandwidth while its working set fits the L2, HBM bandwidth beyond, each
    kernel's time its bytes over that plus a fixed FIXED_S (the bandwidth net of it, as the probe reports); the
    other kernels at 0.9 of it."""
    out = []
    for ws in working_set_sizes(min_bytes=2**20, max_bytes=max_bytes, points_per_octave=3):
        bw = l2_bw if ws <= 0.8 * l2_bytes else hbm_bw
        for k in ("read", "write", "copy", "add"):
            b = bw * (1 if k == "add" else 0.9)
            out.append({"kernel": k, "working_set_bytes": ws, "bandwidth_bytes_per_s": b,
                        "time_s": ws / b + FIXED_S})
    return out


def test_l2_and_hbm_levels():
    """An H200-like staircase (60 MB L2 at 10 TB/s, HBM at 4.3 TB/s): two levels, named, with the device's
    memory as the last capacity and the L2 edge within a factor 2 of the L2."""
    levels = detect_gpu_levels(_samples(60e6, 10e12, 4.3e12), 150.1e9, 60e6, FIXED_S)
    assert [lv["name"] for lv in levels] == ["L2", "HBM"]
    # the samples shorter than 4 fixed costs (bytes / bandwidth under 3 fixed costs: below 30 MB at 10 TB/s) stay
    # out of the levels; the first kept is the sweep's next size up
    assert 30e6 <= levels[0]["first_working_set_bytes"] <= 30e6 * 2 ** (1 / 3) * 1.01
    assert levels[-1]["capacity_bytes"] == 150.1e9
    assert levels[-1]["bandwidth_bytes_per_s"] == pytest.approx(4.3e12, rel=1e-6)
    assert 30e6 <= levels[0]["capacity_bytes"] <= 120e6
    assert levels[-1]["copy_bandwidth_bytes_per_s"] == pytest.approx(0.9 * 4.3e12, rel=1e-6)


def test_one_plateau_is_hbm():
    levels = detect_gpu_levels(_samples(0.5e6, 4.3e12, 4.3e12), 80e9, 0)
    assert [lv["name"] for lv in levels] == ["HBM"]


def test_a_sweep_inside_the_l2_has_no_hbm_level():
    """Stopped at 32 MiB on a 60 MiB L2 (the reviewer's `--max-bytes 33554432` on the H200 printed 'HBM 7229
    GB/s' and calibrate clipped vector_bw_efficiency to 1): refused in one line, naming the size to reach."""
    from narrowpath.errors import NarrowpathError
    with pytest.raises(NarrowpathError, match=r"stops at 32 MiB, within 4x the device's 57 MiB L2.*raise --max-bytes"):
        detect_gpu_levels(_samples(60e6, 10e12, 4.3e12, max_bytes=32 * 2**20), 150.1e9, 60e6, FIXED_S)
    with pytest.raises(NarrowpathError, match="no sample lasts long enough"):
        detect_gpu_levels(_samples(60e6, 10e12, 4.3e12, max_bytes=4 * 2**20), 150.1e9, 0, 1e-3)


def test_calibrate_refuses_a_gpu_probe_without_hbm(tmp_path):
    from narrowpath.errors import NarrowpathError
    from narrowpath.measure.profile import build_profile
    probe = {"probe": "memory", "backend": "torch-cuda", "device": "NVIDIA H200", "level_kernel": "add",
             "samples": [], "levels": [{"name": "L2", "capacity_bytes": 4e7, "bandwidth_bytes_per_s": 7e12,
                                        "first_working_set_bytes": 2e7, "last_working_set_bytes": 3e7}]}
    with pytest.raises(NarrowpathError, match="no HBM level"):
        build_profile(name="x", device="H200-SXM-141GB", memory=probe, peak_mem_bw_bytes_per_s=4.8e12)


def test_calibrate_reads_a_gpu_memory_probe_against_hbm(tmp_path, capsys):
    """A GPU memory probe (backend torch-cuda) with --device: its HBM plateau over the device's 4.8 TB/s is
    vector_bw_efficiency and its levels are the profile's (a host probe is left out: test_calibrate_checks)."""
    from narrowpath.catalog.resolve import calibration_from
    from narrowpath.cli.main import main
    gpu = {"probe": "memory", "backend": "torch-cuda", "device": "NVIDIA H200", "dtype": "float32",
           "level_kernel": "add", "samples": _samples(60e6, 10e12, 4.3e12)}
    gpu["levels"] = detect_gpu_levels(gpu["samples"], 150.1e9, 60e6, FIXED_S)
    src, out = tmp_path / "mem.json", tmp_path / "p.yaml"
    src.write_text(json.dumps(gpu))
    assert main(["calibrate", str(src), "--device", "H200-SXM-141GB", "--base", "H200-SXM-141GB",
                 "-o", str(out)]) == 0
    assert "left out" not in capsys.readouterr().err
    cal = calibration_from(str(out))
    assert cal.vector_bw_efficiency == pytest.approx(4.3 / 4.8, rel=1e-3)
    assert [lv.name for lv in cal.memory_levels] == ["L2", "HBM"]


def test_staircase_plot_of_the_recorded_h200_probe(tmp_path):
    """--plots on a GPU memory probe draws the device's L2 where a host probe draws the OS caches (it raised
    KeyError: 'os_caches')."""
    pytest.importorskip("matplotlib")
    from narrowpath.report.measure_plots import plot_memory
    result = json.loads((DATA / "probe_memory_gpu.json").read_text())
    path = plot_memory(result, tmp_path)
    assert path.stat().st_size > 10_000


def test_calibrate_warns_when_the_probe_ran_on_another_gpu(tmp_path, capsys):
    """A GPU memory probe of an A100 calibrated as an H200 (its HBM would read 0.40 of the H200's): said."""
    from narrowpath.cli.main import main
    gpu = {"probe": "memory", "backend": "torch-cuda", "device": "NVIDIA A100-SXM4-80GB", "dtype": "float32",
           "level_kernel": "add", "samples": _samples(40e6, 7e12, 1.9e12)}
    gpu["levels"] = detect_gpu_levels(gpu["samples"], 85.1e9, 40e6, FIXED_S)
    src = tmp_path / "mem.json"
    src.write_text(json.dumps(gpu))
    assert main(["calibrate", str(src), "--device", "H200-SXM-141GB", "-o", str(tmp_path / "p.yaml")]) == 0
    err = capsys.readouterr().err
    assert "measured on NVIDIA A100-SXM4-80GB (A100-SXM4-80GB), not on an H200-SXM-141GB" in err
