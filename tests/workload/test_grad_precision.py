"""Gradient format (plan.grad_precision): the buffer a rank accumulates its gradients in and reduces over data
parallelism. Megatron-LM forces fp32 for bf16 runs (--accumulate-allreduce-grads-in-fp32); Megatron-Core DDP with
grad_reduce_in_fp32 = False keeps the main_grad buffer and its reduce-scatter in the parameters' bf16, as NVIDIA's
performance recipes run (Megatron-Bridge for every format, NeMo 2 for FP8 runs: catalog/stacks.yaml). Worked by
hand on Llama-3 8B (8.03e9 parameters) and on the stack defaults of two corpus cases."""
from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest

from narrowpath.catalog import load_scenario
from narrowpath.catalog.resolve import plan_with_stack_defaults
from narrowpath.errors import SpecError
from narrowpath.schedule.step import predict
from narrowpath.spec.plan import Plan
from narrowpath.workload.build import grad_bytes_per_param, grad_format, step_transfers


@pytest.mark.parametrize("precision,grad,fmt,nbytes", [
    ("bf16", "auto", "fp32", 4), ("fp8", "auto", "fp32", 4), ("fp16", "auto", "fp16", 2), ("fp32", "auto", "fp32", 4),
    ("bf16", "bf16", "bf16", 2), ("mxfp8", "bf16", "bf16", 2), ("nvfp4", "bf16", "bf16", 2),
    ("fp16", "fp32", "fp32", 4), ("bf16", "fp32", "fp32", 4)])
def test_format_and_bytes_per_parameter(precision, grad, fmt, nbytes):
    plan = Plan(precision=precision, grad_precision=grad)
    assert grad_format(plan) == fmt
    assert grad_bytes_per_param(plan) == nbytes


@pytest.mark.parametrize("precision", ["fp16", "fp32"])
def test_bf16_gradients_need_bf16_parameters(precision):
    with pytest.raises(SpecError, match="plan.grad_precision"):
        Plan(precision=precision, grad_precision="bf16")
    with pytest.raises(SpecError, match="plan.grad_precision"):
        Plan(grad_precision="fp8")


def _llama8b(**kw):
    s = load_scenario("llama3-8b-h100-8")
    return dataclasses.replace(s, plan=dataclasses.replace(s.plan, **kw))


def test_bf16_gradients_halve_the_gradient_buffer():
    """8.03e9 parameters, no ZeRO-2 sharding: 32.1 GB of fp32 gradients, 16.1 GB in bf16."""
    fp32, bf16 = (predict(_llama8b(grad_precision=g, zero_stage=1)).memory for g in ("auto", "bf16"))
    params = fp32.items["gradients"] / 4
    assert params == pytest.approx(8.03e9, rel=0.01)
    assert bf16.items["gradients"] == pytest.approx(2 * params)
    assert fp32.total_bytes - bf16.total_bytes == pytest.approx(2 * params)


def test_bf16_gradients_halve_what_data_parallelism_reduces():
    """The reduce-scatter carries the gradient buffer (2 B/param instead of 4); the parameter all-gather the 16-bit
    weights either way."""
    def sizes(g):
        scn = _llama8b(grad_precision=g, zero_stage=1)
        return {t.name: t.message_bytes for t, _ in step_transfers(scn, 1e9, 0.0)}
    a, b = sizes("auto"), sizes("bf16")
    assert a["dp.grad_reduce_scatter"] == 4e9 and b["dp.grad_reduce_scatter"] == 2e9
    assert a["dp.param_all_gather"] == b["dp.param_all_gather"] == 2e9


def test_zero2_shards_the_smaller_buffer_too():
    fp32, bf16 = (predict(_llama8b(grad_precision=g, zero_stage=2)).memory.items["gradients"] for g in ("fp32", "bf16"))
    assert bf16 == pytest.approx(fp32 / 2)


def test_prediction_says_the_gradient_format():
    assert "gradients accumulated and communicated in bf16" in predict(_llama8b(grad_precision="bf16")).assumptions


@pytest.mark.parametrize("framework,precision,expected", [
    ("Megatron-Bridge / NeMo 26.04 container (BF16)", "bf16", "bf16"),
    ("Megatron-Bridge / NeMo 25.09 container (FP8 per-tensor current scaling)", "fp8", "bf16"),
    ("Megatron-Bridge / NeMo 26.04 container (NVFP4)", "nvfp4", "bf16"),
    ("NeMo 25.07", "fp8", "bf16"),
    ("NeMo 25.07", "mxfp8", "bf16"),
    ("NeMo 25.07", "bf16", "auto"),       # bf16_mixed() keeps grad_reduce_in_fp32
    ("Megatron-LM", "bf16", "auto"),
    ("", "fp16", "auto")])
def test_stack_defaults_follow_the_recipes_per_training_format(framework, precision, expected):
    plan, _, chosen = plan_with_stack_defaults({"dp": 8, "gbs": 8, "precision": precision, "framework": framework})
    assert plan.grad_precision == expected
    assert any(k == "grad_precision" for k, _ in chosen) == (expected != "auto")


def test_a_stated_gradient_format_wins_over_the_stack():
    plan, _, chosen = plan_with_stack_defaults({"dp": 8, "gbs": 8, "precision": "bf16", "grad_precision": "fp32",
                                                 "framework": "Megatron-Bridge 26.04"})
    assert plan.grad_precision == "fp32" and not any(k == "grad_precision" for k, _ in chosen)


def test_cli_flag_and_json():
    out = subprocess.run([sys.executable, "-m", "narrowpath", "predict", "llama3-8b-h100-8", "--grad-precision", "bf16",
                          "--json"], capture_output=True, text=True, check=True)
    assert '"grad_precision": "bf16"' in out.stdout
    bad = subprocess.run([sys.executable, "-m", "narrowpath", "predict", "llama3-8b-h100-8", "--precision", "fp16",
                          "--grad-precision", "bf16"], capture_output=True, text=True)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "plan.grad_precision" in bad.stderr


@pytest.mark.parametrize("zero,name", [(2, "dp.zero2_grad_reduce_scatter"), (3, "dp.zero3_grad_reduce_scatter")])
def test_per_micro_batch_reduce_scatters_carry_the_gradient_format(zero, name):
    """ZeRO-2 with accumulation and ZeRO-3 reduce-scatter each layer's gradients per micro-batch: in bf16 half the
    fp32 bytes."""
    from narrowpath.workload.build import build_workload

    def sizes(g):
        scn = _llama8b(grad_precision=g, zero_stage=zero, gbs=64)
        return [t.message_bytes for st in build_workload(scn, "flash").stages for t, _ in st.transfers
                if t.name == name]
    a, b = sizes("fp32"), sizes("bf16")
    assert a and all(y == pytest.approx(x / 2) for x, y in zip(a, b))


def test_tied_embedding_all_reduce_carries_the_gradient_format():
    """The first and last stage all-reduce the tied embedding's gradient (vocab · hidden / tp values)."""
    from narrowpath.spec.parse import model_from_dict
    m = model_from_dict(dict(name="tied", layers=4, hidden=1024, heads=8, kv_heads=8, ffn=4096, vocab=32000,
                             seq_len=1024, tied_embeddings=True))
    s = _llama8b()

    def size(g):
        scn = dataclasses.replace(s, model=m, plan=dataclasses.replace(s.plan, pp=2, dp=4, gbs=8, grad_precision=g,
                                                                       zero_stage=1))
        return {t.name: t.message_bytes for t, _ in step_transfers(scn, 1e6, 0.0)}["pp.tied_embedding_all_reduce"]
    assert size("fp32") == 32000 * 1024 * 4 and size("bf16") == 32000 * 1024 * 2
