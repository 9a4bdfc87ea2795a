"""FP8 primary weights (plan.fp8_params; Transformer Engine fp8_model_init, Megatron-Core fp8_param_gather): the
linear layers' weights live only as the quantized tensors the GEMMs read, and ZeRO all-gathers per-tensor FP8
weights in FP8 (MXFP8 ones in bf16, through the gradient buffer: reuse_grad_buf_for_mxfp8_param_ag). Bytes per
parameter by hand: 16-bit weight 2 B; per-tensor FP8 copy 1 B, a second (column-wise) one on Hopper; MXFP8 1 B + one
E8M0 scale per 32 values, row-wise and column-wise. The embedding and output layer keep 16-bit weights."""
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
    ("mxfp8", False, True, 2 + 2 * MX, 2), ("mxfp8", True, True, 2 * MX, 2),
    ("nvfp4", False, True, 2 + 2 * (0.5 + 1 / 16), 2)])
def test_bytes_per_parameter(precision, fp8_params, any_layout, held, sharded):
    plan = Plan(precision=precision, fp8_params=fp8_params, zero_stage=1)
    assert held_weight_bytes_per_param(plan, any_layout) == pytest.approx(held)
    assert sharded_weight_bytes_per_param(plan) == pytest.approx(sharded)


@pytest.mark.parametrize("precision", ["bf16", "fp16", "nvfp4"])
def test_needs_an_fp8_recipe(precision):
    with pytest.raises(SpecError, match="plan.fp8_params"):
        Plan(precision=precision, fp8_params=True, zero_stage=1)


@pytest.mark.parametrize("zero", [0, 2])
def test_needs_the_distributed_optimizer_or_fsdp(zero):
    """Megatron-LM: '--fp8-param-gather only supported with distributed optimizer, torch fsdp2, megatron fsdp'."""
    with pytest.raises(SpecError, match="plan.fp8_params"):
        Plan(precision="fp8", fp8_params=True, zero_stage=zero)


def _h100_fp8(**kw):
    s = load_scenario("llama3-8b-h100-8")
    return dataclasses.replace(s, plan=dataclasses.replace(s.plan, **{"precision": "fp8", "zero_stage": 1, **kw}))


def _linear_and_table(scn):
    """(linear-layer parameters, embedding + output-layer parameters) of the one-stage plan."""
    from narrowpath.workload.build import build_workload, embedding_params
    total = build_workload(scn, "flash").stages[0].params
    emb = embedding_params(scn, True, True)
    return total - emb, emb


def test_the_weights_shrink_by_the_16_bit_copy():
    """Llama-3 8B on H100 (two FP8 copies): the 6.98e9 linear-layer parameters hold 2 + 2 B each, 2 B as FP8 params;
    the 1.05e9 embedding and output parameters 2 B either way (not Transformer Engine modules)."""
    s0 = _h100_fp8()
    lin, emb = _linear_and_table(s0)
    assert lin == pytest.approx(6.98e9, rel=0.01) and emb == pytest.approx(1.05e9, rel=0.01)
    a, b = (predict(_h100_fp8(fp8_params=f)).memory.items["weights"] for f in (False, True))
    assert a == pytest.approx(4 * lin + 2 * emb) and b == pytest.approx(2 * lin + 2 * emb)


def test_zero3_shards_and_gathers_fp8():
    a, b = (predict(_h100_fp8(fp8_params=f, zero_stage=3)).memory.items["weights"] for f in (False, True))
    lin, emb = (x / 8 for x in _linear_and_table(_h100_fp8()))  # sharded over dp 8
    assert a == pytest.approx(2 * lin + 2 * emb) and b == pytest.approx(1 * lin + 2 * emb)
    gathers = [t.message_bytes for t in predict(_h100_fp8(fp8_params=True, zero_stage=3)).transfers
               if "param_all_gather" in t.name]
    plain = [t.message_bytes for t in predict(_h100_fp8(zero_stage=3)).transfers if "param_all_gather" in t.name]
    assert gathers and all(g == pytest.approx(p / 2) for g, p in zip(gathers, plain))


@pytest.mark.parametrize("sysname,expected", [("dgx-h100", "weight_transpose"), ("dgx-b200", None)])
def test_zero3_fp8_weights_need_only_their_transpose_per_micro_batch(sysname, expected):
    """Gathered 16-bit weights are quantized every micro-batch (read 2 B twice for the amax, write both copies); FP8
    primary weights arrive quantized and need only their column-wise copy on Hopper (read 1 B, write 1 B per
    element), nothing where FP8 GEMMs take any layout."""
    from narrowpath.workload.build import layer_ops
    scn = dataclasses.replace(_h100_fp8(fp8_params=True, zero_stage=3), system=system(sysname))
    names = {op.name for op, _ in layer_ops(scn, "flash", False, False)}
    assert "weight_quantize" not in names
    assert (expected in names) if expected else not any("weight_" in n for n in names)
    plain = {op.name for op, _ in layer_ops(dataclasses.replace(scn, plan=dataclasses.replace(
        scn.plan, fp8_params=False)), "flash", False, False)}
    assert "weight_quantize" in plain


def test_mxfp8_weights_are_gathered_in_bf16():
    """Megatron-Bridge's MXFP8 recipe gathers through the bf16 gradient buffer (reuse_grad_buf_for_mxfp8_param_ag)."""
    plan = Plan(precision="mxfp8", fp8_params=True, zero_stage=1, dp=8, gbs=8)
    assert sharded_weight_bytes_per_param(plan) == 2.0


def test_the_parameter_all_gather_moves_fp8():
    def sizes(f):
        return {t.name: t.message_bytes for t, _ in step_transfers(_h100_fp8(fp8_params=f), 1e9, 0.0)}
    assert sizes(False)["dp.param_all_gather"] == 2e9 and sizes(True)["dp.param_all_gather"] == 1e9
    assert sizes(True)["dp.grad_reduce_scatter"] == sizes(False)["dp.grad_reduce_scatter"]


def test_the_optimizer_writes_no_16_bit_weights():
    """Adam moves G + K + K + W + G bytes per parameter (4 + 12 + 12 + 2 + 4 = 34); FP8 params drop the 16-bit W
    (32) and cast the fp32 master to FP8 instead (amax read 4 B, cast read 4 B + write 1 B = 9 B per parameter),
    then transpose the full weights (1 B in, 1 B out) where the device needs the column-wise copy."""
    ops = {f: {op.name: op for op, _ in optimizer_ops(Plan(precision="fp8", fp8_params=f, zero_stage=1), 1e9, 0.0)}
           for f in (False, True)}
    assert ops[False]["adam"].hbm_bytes == 34e9 and ops[True]["adam"].hbm_bytes == 32e9
    assert "weight_quantize" in ops[False] and "weight_quantize" not in ops[True]
    assert ops[True]["weight_cast"].hbm_bytes == 9e9
    assert ops[True]["weight_transpose"].hbm_bytes == ops[True]["weight_transpose"].transpose_bytes == 2e9


def test_adam_with_bf16_gradients():
    """2 + 12 + 12 + 2 + 2 = 30 bytes per parameter; with FP8 params 28."""
    for f, expected in ((False, 30e9), (True, 28e9)):
        plan = Plan(precision="fp8", fp8_params=f, grad_precision="bf16", zero_stage=1)
        assert optimizer_ops(plan, 1e9, 0.0)[0][0].hbm_bytes == expected


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
    lin, emb = _linear_and_table(s)
    h = predict(s).memory.items["weights"]
    b = predict(dataclasses.replace(s, system=system("dgx-b200"))).memory.items["weights"]
    assert h == pytest.approx(2 * lin + 2 * emb) and b == pytest.approx(1 * lin + 2 * emb)


def test_cli_precision_flag_re_derives_what_the_stack_filled(tmp_path):
    """A Megatron-Bridge FP8 scenario: its stack fills fp8_params and bf16 gradients; --precision bf16 drops the FP8
    weights (no error about a knob the user never set), --precision fp16 the bf16 gradients too, and a knob given
    on the command line is kept."""
    import json
    import subprocess
    import sys
    f = tmp_path / "mb.yaml"
    f.write_text("name: mb\nsystem: dgx-b200\nmodel: llama3-8b\nnum_gpus: 8\nplan: {tp: 1, pp: 1, dp: 8, mbs: 1, "
                 "gbs: 64, zero_stage: 1, precision: fp8, framework: Megatron-Bridge 26.04}\n")

    def plan(*flags):
        out = subprocess.run([sys.executable, "-m", "narrowpath", "predict", str(f), "--json", *flags],
                             capture_output=True, text=True, check=True)
        return json.loads(out.stdout)["plan"]
    assert (plan()["fp8_params"], plan()["grad_precision"]) == (True, "bf16")
    assert (plan("--precision", "bf16")["fp8_params"], plan("--precision", "bf16")["grad_precision"]) == (False, "bf16")
    assert plan("--precision", "fp16")["grad_precision"] == "auto"
    assert plan("--precision", "bf16", "--grad-precision", "fp32")["grad_precision"] == "fp32"


def test_a_stack_note_is_recognised_and_a_choice_or_statement_is_not():
    """`restack_for_precision` re-derives exactly the knobs whose note is a stack note, from the plan reader or from
    the null-knob chooser (with its '(not published)' suffix); a searched choice's note is not one."""
    from narrowpath.catalog.resolve import restack_for_precision
    from narrowpath.catalog.store import set_by_stack, stack_note
    assert set_by_stack(stack_note(True, "megatron-bridge"))
    assert set_by_stack(stack_note("bf16", "nemo", " (not published)"))
    assert not set_by_stack("recompute='none' — fastest that fits in memory of 8 settings tried (not published)")
    plan = Plan(dp=8, gbs=8, zero_stage=1, precision="fp8", fp8_params=True, framework="Megatron-Bridge 26.04 (FP8)")
    chosen = (("fp8_params", stack_note(True, "megatron-bridge")), ("recompute", "'none' — fastest that fits"))
    fields, notes = restack_for_precision(plan, chosen, "bf16", set())
    assert fields == {"fp8_params": False} and dict(notes) == {"recompute": "'none' — fastest that fits"}
