"""FP8 primary weights (plan.fp8_params; Transformer Engine fp8_model_init, Megatron-Core fp8_param_gather): the
weights live only as the quantized tensors the GEMMs read, and ZeRO all-gathers them in FP8. Bytes per parameter
by hand: 16-bit weight 2 B; per-tensor FP8 copy 1 B, a second (column-wise) one on Hopper; MXFP8 1 B + one E8M0
scale per 32 values, row-wise and column-wise."""
from __future__ import annotations

import dataclasses

import pytest

from narrowpath.catalog import load_scenario, system
from narrowpath.catalog.resolve import plan_with_stack_defaults
from narrowpath.errors import SpecError
from narrowpath.schedule.step import predict
from narrowpath.spec.plan import Plan
from narrowpath.workload.build import (held_weight_bytes_per_param, optimizer_ops, sharded_weight_bytes_per_param,
                                       step_transfers)

MX = 1 + 1 / 32


@pytest.mark.parametrize("precision,fp8_params,any_layout,held,sharded", [
    ("bf16", False, False, 2, 2),
    ("fp8", False, False, 2 + 2, 2), ("fp8", True, False, 2, 1),     # Hopper: row-wise + column-wise FP8
    ("fp8", False, True, 2 + 1, 2), ("fp8", True, True, 1, 1),       # Blackwell: one copy in any layout
    ("mxfp8", False, True, 2 + 2 * MX, 2), ("mxfp8", True, True, 2 * MX, MX),
    ("nvfp4", False, True, 2 + 2 * (0.5 + 1 / 16), 2)])
def test_bytes_per_parameter(precision, fp8_params, any_layout, held, sharded):
    plan = Plan(precision=precision, fp8_params=fp8_params)
    assert held_weight_bytes_per_param(plan, any_layout) == pytest.approx(held)
    assert sharded_weight_bytes_per_param(plan) == pytest.approx(sharded)


@pytest.mark.parametrize("precision", ["bf16", "fp16", "nvfp4"])
def test_needs_an_fp8_recipe(precision):
    with pytest.raises(SpecError, match="plan.fp8_params"):
        Plan(precision=precision, fp8_params=True)


def _h100_fp8(**kw):
    s = load_scenario("llama3-8b-h100-8")
    return dataclasses.replace(s, plan=dataclasses.replace(s.plan, **{"precision": "fp8", "zero_stage": 1, **kw}))


def test_the_weights_shrink_by_the_16_bit_copy():
    """8.03e9 parameters on H100 (two FP8 copies): 32.1 GB of weights and cached copies, 16.1 GB as FP8 params."""
    a, b = (predict(_h100_fp8(fp8_params=f)).memory.items["weights"] for f in (False, True))
    assert a == pytest.approx(4 * 8.03e9, rel=0.01) and b == pytest.approx(a / 2)


def test_zero3_shards_and_gathers_fp8():
    a, b = (predict(_h100_fp8(fp8_params=f, zero_stage=3)).memory.items["weights"] for f in (False, True))
    assert b == pytest.approx(a / 2)
    gathers = [t.message_bytes for t in predict(_h100_fp8(fp8_params=True, zero_stage=3)).transfers
               if "param_all_gather" in t.name]
    plain = [t.message_bytes for t in predict(_h100_fp8(zero_stage=3)).transfers if "param_all_gather" in t.name]
    assert gathers and all(g == pytest.approx(p / 2) for g, p in zip(gathers, plain))


def test_the_parameter_all_gather_moves_fp8():
    def sizes(f):
        return {t.name: t.message_bytes for t, _ in step_transfers(_h100_fp8(fp8_params=f), 1e9, 0.0)}
    assert sizes(False)["dp.param_all_gather"] == 2e9 and sizes(True)["dp.param_all_gather"] == 1e9
    assert sizes(True)["dp.grad_reduce_scatter"] == sizes(False)["dp.grad_reduce_scatter"]


def test_the_optimizer_writes_no_16_bit_weights():
    """Adam moves G + K + K + W + G bytes per parameter (4 + 12 + 12 + 2 + 4 = 34); FP8 params drop the 16-bit W."""
    a, b = (optimizer_ops(Plan(precision="fp8", fp8_params=f), 1e9, 0.0)[0][0].hbm_bytes for f in (False, True))
    assert a == 34e9 and b == 32e9


@pytest.mark.parametrize("framework,precision,expected", [
    ("Megatron-Bridge / NeMo 25.09 container (FP8 per-tensor current scaling)", "fp8", True),
    ("Megatron-Bridge / NeMo 26.04 container (MXFP8 (32-element block scaling))", "mxfp8", True),
    ("Megatron-Bridge / NeMo 26.04 container (NVFP4)", "nvfp4", False),
    ("NeMo 25.07 (FP8 per-tensor current scaling)", "fp8", True),
    ("NeMo 25.07 (parenthesised variant, assumed MXFP8)", "mxfp8", False),
    ("Megatron-LM", "fp8", False)])
def test_stack_defaults(framework, precision, expected):
    plan, _, _ = plan_with_stack_defaults({"dp": 8, "gbs": 8, "precision": precision, "framework": framework})
    assert plan.fp8_params is expected


def test_blackwell_and_hopper_differ_by_the_column_wise_copy():
    s = _h100_fp8(fp8_params=True)
    h = predict(s).memory.items["weights"]
    b = predict(dataclasses.replace(s, system=system("dgx-b200"))).memory.items["weights"]
    assert b == pytest.approx(h / 2)
