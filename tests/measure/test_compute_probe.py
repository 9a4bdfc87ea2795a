"""The compute probe runs for real at small sizes and reports rates with provenance."""
from __future__ import annotations

import math

import pytest

from narrowpath.measure.compute_probe import probe_compute


@pytest.fixture(scope="module")
def compute_result():
    return probe_compute(quick=True, sizes=(64, 128, 256), repeats=2, progress=False, cuda=False)


def test_samples_positive_finite(compute_result):
    for s in compute_result["samples"]:
        assert s["flop"] == 2.0 * s["n"] ** 3
        assert math.isfinite(s["flops_per_s"]) and s["flops_per_s"] > 0
        assert s["time_s"] > 0 and s["repeats"] == 2 and s["device"] and s["dtype"]


def test_best_by_dtype_is_the_max(compute_result):
    best = compute_result["best_flops_per_s"]
    assert "fp32" in best and "fp64" in best
    for dt, v in best.items():
        assert v == max(s["flops_per_s"] for s in compute_result["samples"] if s["dtype"] == dt)


def test_peaks_given_override_the_estimate():
    r = probe_compute(quick=True, sizes=(64,), repeats=1, progress=False, cuda=False, peaks={"fp32": 1e15})
    assert r["peaks"]["fp32"]["peak_flops_per_s"] == 1e15
    s = next(s for s in r["samples"] if s["dtype"] == "fp32")
    assert s["efficiency"] == pytest.approx(s["flops_per_s"] / 1e15)


def test_torch_cpu_runs_when_installed(compute_result):
    pytest.importorskip("torch")
    assert any(s["backend"] == "torch-cpu" for s in compute_result["samples"])


def test_a_dtype_the_given_peaks_lack_says_so():
    """On a GPU with --device, a dtype the catalog device has no rate for (fp64: measured by NumPy on the host)
    is not told to pass --device again (seen on the H200 probe)."""
    from narrowpath.measure.compute_probe import _peaks
    out = _peaks({"bf16": 7e14, "fp64": 4e11}, {"bf16": 9.894e14}, cuda=True)
    assert out["bf16"]["peak_flops_per_s"] == 9.894e14
    assert out["fp64"]["peak_flops_per_s"] == 0.0
    assert out["fp64"]["reason"] == "the given peaks (--device or --peak) have no fp64 rate"
    assert "pass --device" in _peaks({"bf16": 7e14}, {}, cuda=True)["bf16"]["reason"]


def test_fp8_gemms_on_a_gpu_with_fp8_tensor_cores(monkeypatch):
    """The plan adds E4M3 GEMMs where the GPU has FP8 tensor cores (capability 8.9+: the H200 probe measured
    them, benchmarks/data/h200/probe_compute_graph.json) and not on an A100 (8.0)."""
    import torch
    from narrowpath.measure import compute_probe
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *_: (9, 0))
    assert ("torch-cuda", "fp8", compute_probe.CUDA_SIZES) in compute_probe._plan(False, True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *_: (8, 0))
    assert all(dt != "fp8" for _, dt, _ in compute_probe._plan(False, True))
