"""FP8 operands in any layout on data-center Blackwell (Device.fp8_any_layout): Transformer Engine keeps one
per-tensor FP8 copy and writes no transposed copy where `is_non_tn_fp8_gemm_supported()` holds (compute capability
10.x-11.x or >= 13), so quantize kernels write 1 byte less per element and each cached weight costs one FP8 byte
instead of two; block-scaled formats keep both copies everywhere."""
from __future__ import annotations

import dataclasses

import pytest

from narrowpath.catalog import device, load_scenario, system
from narrowpath.cost.roofline import hbm_bytes
from narrowpath.schedule.step import predict
from narrowpath.spec.plan import Plan
from narrowpath.validate.corpus import load_corpus
from narrowpath.workload.ops import backward_ops, linear
from narrowpath.workload.precision import quantized_weight_copies

M, K, N = 4096.0, 8192.0, 8192.0


@pytest.mark.parametrize("name,any_layout", [("B200", True), ("GB200", True), ("B300", True), ("GB300", True),
                                             ("H100-SXM5-80GB", False), ("H200-SXM-141GB", False),
                                             ("H800-SXM5-80GB", False), ("A100-SXM4-80GB", False),
                                             ("RTX-PRO-6000-Blackwell-Server", False), ("MI300X", False)])
def test_catalog_follows_transformer_engines_capability_rule(name, any_layout):
    """sm_100 / sm_103 parts take any layout; Hopper, Ampere and the sm_120 RTX Blackwell do not."""
    assert device(name).fp8_any_layout is any_layout


def _quantize(precision: str):
    ops = linear("proj", Plan(precision=precision), M, K, N)
    return ops[0], ops[1]


def test_fp8_input_quantize_skips_the_transpose_where_any_layout_works():
    """Per-tensor current scaling: amax pass + cast read BF16 twice (2 × 2 B) and write row-wise + column-wise FP8
    (2 × 1 B) = 6 B per element on Hopper; 5 B on B200."""
    q, _ = _quantize("fp8")
    assert hbm_bytes(q, device("H100-SXM5-80GB")) == pytest.approx(M * K * 6)
    assert hbm_bytes(q, device("B200")) == pytest.approx(M * K * 5)


def test_fp8_output_gradient_quantize_skips_the_transpose_too():
    """The output gradient M × N: 6 B per element on Hopper, 5 on B200."""
    _, gemm = _quantize("fp8")
    gq = [op for op in backward_ops([gemm], Plan(precision="fp8")) if op.name.endswith("grad_quantize")][0]
    assert hbm_bytes(gq, device("H100-SXM5-80GB")) == pytest.approx(M * N * 6)
    assert hbm_bytes(gq, device("B200")) == pytest.approx(M * N * 5)


@pytest.mark.parametrize("precision", ["mxfp8", "nvfp4"])
def test_block_scaled_formats_keep_both_copies_everywhere(precision):
    q, _ = _quantize(precision)
    assert q.transpose_bytes == 0.0
    assert hbm_bytes(q, device("B200")) == q.hbm_bytes
    assert quantized_weight_copies(precision, True) == 2


def test_cached_weight_copies_by_format_and_device():
    assert quantized_weight_copies("fp8", False) == 2
    assert quantized_weight_copies("fp8", True) == 1


def test_fp8_weights_cost_3_bytes_per_parameter_on_b200_and_4_on_hopper():
    """ZeRO-1 keeps BF16 weights (2 B) plus, for the linear layers (Transformer Engine modules), the cached FP8
    copies: 1 B on B200, 2 B on H100. Llama-3 8B: 8,030,261,248 parameters, of which the embedding table, the
    output layer and the final norm are 2 · 128,256 · 4,096 + 4,096 = 1,050,677,248 (16-bit only)."""
    s = load_scenario("llama3-8b-h100-8")
    plan = dataclasses.replace(s.plan, precision="fp8", zero_stage=1)
    total, emb = 8_030_261_248, 2 * 128_256 * 4_096 + 4_096
    expected = {"dgx-b200": 2 * total + 1 * (total - emb), "dgx-h100": 2 * total + 2 * (total - emb)}
    for sysname, want in expected.items():
        scn = dataclasses.replace(s, system=system(sysname), plan=plan)
        assert predict(scn).memory.items["weights"] == pytest.approx(want)


def test_llama4_scout_on_gb200_fits_as_published():
    """NeMo 25.07 ran Llama 4 Scout FP8 with tp 1, ep 16, ZeRO-1 on 64 GB200s. Its FP8 recipe keeps the weights as FP8
    tensors (fp8_param_gather) and reduces bf16 gradients (catalog/stacks.yaml): with one FP8 copy per weight where
    any layout works the rank holds its 21.2e9 linear-layer parameters at 1 B each, two copies (a column-wise one as
    on Hopper) 2 B; the 2.05e9 embedding and output parameters stay 16-bit."""
    case = next(c for c in load_corpus(None) if c.id == "nemo25-07-llama4-scout-llm-gb200-n64-gbs1024")
    p = predict(case.scenario)
    assert p.memory.fits
    assert case.scenario.plan.fp8_params and case.scenario.plan.grad_precision == "bf16"
    two_copies = dataclasses.replace(case.scenario.system.device, fp8_any_layout=False)
    scn = dataclasses.replace(case.scenario, system=dataclasses.replace(case.scenario.system, device=two_copies))
    one, two = p.memory.items["weights"], predict(scn).memory.items["weights"]
    emb = 2 * 200_000 * 5_120 + 5_120  # embedding table, output layer, final norm: 16-bit only
    linear = one - 2 * emb
    assert linear == pytest.approx(23.19e9 - emb, rel=0.01) and two == pytest.approx(2 * linear + 2 * emb)


def test_the_data_movement_ledger_counts_the_bytes_the_roofline_prices():
    """The ledger (and the energy and roofline plot built on it) reads HBM bytes through cost.roofline.hbm_bytes."""
    from narrowpath.analysis.ledger import op_level_bytes
    q, _ = _quantize("fp8")
    for name in ("B200", "H100-SXM5-80GB"):
        assert op_level_bytes(q, "hbm", device(name)) == hbm_bytes(q, device(name))
    assert op_level_bytes(q, "hbm", device("B200")) < q.hbm_bytes


def test_the_flag_must_be_a_boolean():
    from narrowpath.errors import SpecError
    with pytest.raises(SpecError, match="fp8_any_layout"):
        dataclasses.replace(device("B200"), fp8_any_layout="no")
