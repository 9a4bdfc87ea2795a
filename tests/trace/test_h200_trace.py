"""A real PyTorch profiler trace from an H200 (benchmarks/data/h200/train_trace.json.gz: one training step of a
Llama-3-8B-shaped model cut to 8 layers, sequence 8,192, PyTorch 2.11 SDPA with cuDNN's fused attention, recorded
by benchmarks/gpu_measure.py on the project's device machine): Hopper kernel names land in the right categories,
and `trace --against` puts the kernel time of each class beside the model's."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from narrowpath.cli.main import main
from narrowpath.trace import schema

DATA = Path(__file__).resolve().parents[2] / "benchmarks" / "data" / "h200"
TRACE = DATA / "train_trace.json.gz"
SCENARIO = DATA / "train-8l.yaml"


@pytest.mark.parametrize("name, category", [
    # cuDNN's fused attention: its sm90 tag used to make it a GEMM, its backward helpers convolution / other
    ("cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_f16_knob_26_64x64x128_1x4x1_cga1x1x1_kernel0_0",
     "attention"),
    ("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x128_4x1x1_cga1x1x1_kernel0_0",
     "attention"),
    ("void cudnn::fusion::compute_dot_do_o_specialized<true, 128>(void const*, void const*, void*, void*, unsigned "
     "int)", "attention"),
    ("void cudnn::fusion::convert_dq_to_16bits<true>(void const*, void*, unsigned int, unsigned int, unsigned int)",
     "attention"),
    # cuBLAS's Hopper GEMMs
    ("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT", "gemm"),
    ("void cublasLt::splitKreduce_kernel<32, 16, int, float, __nv_bfloat16, float, __nv_bfloat16>", "gemm"),
    # the weight and bias gradients of a layer / RMS norm
    ("void at::native::(anonymous namespace)::GammaBetaBackwardCUDAKernelTemplate<float, float, 32u, 32u, 256u, "
     "false>", "normalization"),
    ("void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float>", "reduction"),
    # other stacks' attention kernels, and names that hold "flash" without being attention
    ("void flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, cutlass::bfloat16_t>>",
     "attention"),
    ("void flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<Flash_bwd_kernel_traits<128>>", "attention"),
    ("void cutlass::device_kernel<flash::FlashAttnFwdSm90<...>>", "attention"),
    ("fmha_cutlassF_bf16_aligned_64x128_rf_sm80", "attention"),
    ("void tensorrt_llm::kernels::xqa_kernel_dt_bf16_d128", "attention"),
    ("flashinfer::BatchPrefillWithPagedKVCacheKernel<...>", "attention"),
    ("void flashinfer::gemm::CutlassSegmentGEMMKernel<...>", "gemm"),
    ("triton_tem_fused_mm_0", "gemm"),
    ("sm80_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize160x128x32", "gemm"),
    # gradient clipping's norm is the optimizer's foreach work, not a layer norm
    ("void at::native::multi_tensor_apply_kernel<at::native::TensorListMetadata<1>, at::native::LpNormFunctor<float, "
     "1>>", "optimizer"),
])
def test_hopper_kernel_names(name, category):
    assert schema.kernel_category(name) == category


def test_kernel_breakdown_of_the_h200_step(capsys):
    assert main(["trace", str(TRACE), "--json"]) == 0
    kernels = {k["category"]: k for k in json.loads(capsys.readouterr().out)["ranks"][0]["kernels"]}
    # read off the trace by hand: 8 forward + 8 backward cuDNN attention kernels and their 16 helpers; the 99
    # nvjet / splitK GEMM kernels
    assert kernels["attention"]["num_kernels"] == 32
    assert kernels["attention"]["total_s"] == pytest.approx(32.07e-3, abs=0.01e-3)
    assert kernels["gemm"]["num_kernels"] == 99
    assert kernels["gemm"]["total_s"] == pytest.approx(146.62e-3, abs=0.01e-3)
    assert "convolution" not in kernels


def test_against_puts_kernel_classes_beside_the_model(capsys):
    assert main(["trace", str(TRACE), "--against", str(SCENARIO), "--json"]) == 0
    against = json.loads(capsys.readouterr().out)["against"]
    obs, pred = against["observed_kernel_s"], against["predicted_kernel_s"]
    assert set(pred) == {"gemm", "attention", "elementwise", "optimizer"}
    # observed: the categories summed (gemm 146.62, attention 32.07, optimizer 24.08 ms; element-wise, norms,
    # reductions and the rest 65.39 ms), one step in the window
    assert obs["gemm"] == pytest.approx(146.62e-3, abs=0.01e-3)
    assert obs["elementwise"] == pytest.approx(65.39e-3, abs=0.02e-3)
    # the model's classes add up to its step on one GPU (no communication, no host wait)
    assert sum(pred.values()) == pytest.approx(against["predicted_step_s"], rel=1e-9)
    # attention by hand: 8 layers of causal flash at s = 8,192, h = 4,096, forward FLOPs 4·s²·h·f with the causal
    # tile fraction f = (1 + 128/s)/2 = 0.5078 (5.583e11 per layer), backward 2.5x; each at the H200 profile's
    # 0.55 x 0.7 of 989.4 TFLOP/s times the ramp F/(F + 6e9) = 0.98937 (forward) / 0.99572 (backward), plus 4 us
    # per kernel: 8 x (1.4815 + 3.6798) ms + 16 x 4 us = 41.35 ms
    fwd = 5.583e11 / (0.55 * 0.7 * 989.4e12 * 5.583e11 / (5.583e11 + 6e9))
    bwd = 2.5 * 5.583e11 / (0.55 * 0.7 * 989.4e12 * 2.5 * 5.583e11 / (2.5 * 5.583e11 + 6e9))
    assert pred["attention"] == pytest.approx(8 * (fwd + bwd) + 16 * 4e-6, rel=2e-3)
    assert pred["optimizer"] == pytest.approx(against["predicted_step_s"] - pred["gemm"] - pred["attention"]
                                              - pred["elementwise"], rel=1e-9)
    assert pred["elementwise"] < pred["attention"] < pred["gemm"]
    # the element-wise class: norms, rotary, SwiGLU, residuals, and the loss over 8,192 x 128,256 logits (~7 ms
    # of its 16.9 at the profile's 0.85 of 4.8 TB/s) — not empty, not the whole step
    assert 12e-3 < pred["elementwise"] < 22e-3
    # the differences the step time hides are named: GEMMs ~0.7x, element-wise work ~3.9x the predicted time
    text = " ".join(against["differences"])
    assert "elementwise kernels" in text and "gemm kernels" in text


def test_against_table(capsys):
    assert main(["trace", str(TRACE), "--against", str(SCENARIO)]) == 0
    text = capsys.readouterr().out
    assert "kernel class" in text and "obs / pred" in text
    assert "collective  per step" not in text  # no collective on one GPU: no empty table


def test_kernel_classes_of_two_pipeline_ranks(pp_paths):
    """Two ranks of a 128-rank pipeline job (HTA's sampled traces): the observed classes are the busier rank's —
    its summed kernel time per class, not the mean of the two — as the predicted side is the most loaded stage."""
    from narrowpath.trace.analyze import analyze
    from narrowpath.trace.compare import KERNEL_CLASS_OF, observed_kernel_s
    from narrowpath.trace.reader import read_trace
    report = analyze(read_trace(list(pp_paths)))
    per_rank = []
    for r in report.ranks:
        sums: dict[str, float] = {}
        for k in r.kernels:
            if k.category in KERNEL_CLASS_OF:
                sums[KERNEL_CLASS_OF[k.category]] = sums.get(KERNEL_CLASS_OF[k.category], 0.0) + k.total_s
        per_rank.append(sums)
    assert len(per_rank) == 2 and per_rank[0] != per_rank[1]
    busier = max(per_rank, key=lambda s: sum(s.values()))
    got = observed_kernel_s(report, 1)
    for cls, v in busier.items():
        assert got[cls] == pytest.approx(v, rel=1e-12)
