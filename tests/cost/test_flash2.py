"""FlashAttention-2 (`plan.attention: flash2`, the kernel PyTorch's scaled_dot_product_attention runs as its flash
backend) is a flash kernel priced at the device's `flash2_rate` of the fused kernel's rate: on Hopper 0.52 forward
(pytorch/pytorch#142132: 329.5 vs 631.3 TFLOP/s on H100) and 0.62 backward (FlashAttention-3 is 1.5-1.75x faster
than FlashAttention-2 backward, Shah et al. 2024 §4.1: 1/1.625); on A100 it is the fused kernel the calibration
describes, and on Blackwell torchtitan runs cuDNN (pytorch/torchtitan#1196), so both price it as the fused kernel."""
from __future__ import annotations

import dataclasses

import pytest

from narrowpath.catalog import calibration_for, device, load_scenario
from narrowpath.cost.roofline import compute_time_s
from narrowpath.errors import SpecError
from narrowpath.schedule.step import predict
from narrowpath.spec.device import Device
from narrowpath.workload.attention import attention_ops, kernel_of
from narrowpath.workload.ops import as_phase, backward_ops


def _with_attention(scn, attention: str):
    return dataclasses.replace(scn, plan=dataclasses.replace(scn.plan, attention=attention))


def test_kernel_of_maps_flash2_to_a_flash_kernel():
    assert kernel_of("flash2", "unfused") == "flash"
    assert kernel_of("auto", "unfused") == "unfused"
    assert kernel_of("auto", "flash") == "flash"
    assert kernel_of("unfused", "flash") == "unfused"
    assert kernel_of("flash", "unfused") == "flash"


@pytest.mark.parametrize("dev_name, fwd, bwd", [("H100-SXM5-80GB", 0.52, 0.62), ("H200-SXM-141GB", 0.52, 0.62),
                                                ("H800-SXM5-80GB", 0.52, 0.62), ("A100-SXM4-80GB", 1.0, 1.0),
                                                ("B200", 1.0, 1.0)])
def test_flash2_core_runs_at_the_devices_measured_share(dev_name, fwd, bwd):
    """The same attention core as FlashAttention-2 takes 1/0.52 of the fused kernel's forward time and 1/0.62 of its
    backward time on Hopper (matrix-bound at head width 128 there: the exponentials do not bind), unchanged on
    A100 and Blackwell."""
    scn = load_scenario("llama3-8b-h100-8")
    dev, cal = device(dev_name), calibration_for(dev_name)
    fused = attention_ops(scn.model, scn.plan, "flash")
    fa2 = attention_ops(scn.model, dataclasses.replace(scn.plan, attention="flash2"), "flash")
    assert [o.impl for o in fused] == [""] and [o.impl for o in fa2] == ["fa2"]
    for phase, rate in (("fwd", fwd), ("bwd", bwd)):
        ops = (lambda x: x) if phase == "fwd" else backward_ops
        t_fused = compute_time_s(ops(fused)[0], dev, cal)
        t_fa2 = compute_time_s(ops(fa2)[0], dev, cal)
        assert t_fa2 == pytest.approx(t_fused / rate, rel=1e-9)
    # the recompute pass runs the forward kernel again
    re = as_phase(fa2, "recompute")[0]
    assert re.impl == "fa2"
    assert compute_time_s(re, dev, cal) == pytest.approx(compute_time_s(fused[0], dev, cal) / fwd, rel=1e-9)


def test_flash2_slows_a_long_sequence_step_on_hopper_and_says_so():
    """Llama-3 8B on 8 H100 at sequence 32k: the attention core is a large share of the step, so FlashAttention-2
    makes the step clearly slower; predict names the kernel and its rates."""
    base = load_scenario("llama3-8b-h100-8")
    long = dataclasses.replace(base, model=dataclasses.replace(base.model, seq_len=32768),
                               plan=dataclasses.replace(base.plan, mbs=1, gbs=8, recompute="full"))
    fused, fa2 = predict(_with_attention(long, "flash")), predict(_with_attention(long, "flash2"))
    assert fa2.step_time_s > 1.15 * fused.step_time_s
    assert fa2.attention_kernel == "flash"
    assert any("FlashAttention-2 (forward 0.52, backward 0.62" in a for a in fa2.assumptions)


def test_device_flash2_rate_is_checked():
    base = device("H100-SXM5-80GB")
    with pytest.raises(SpecError, match=r"flash2_rate.*unknown pass 'recompute'"):
        dataclasses.replace(base, flash2_rate={"recompute": 0.5})
    with pytest.raises(SpecError, match=r"flash2_rate\.fwd"):
        dataclasses.replace(base, flash2_rate={"fwd": 1.5})
    assert isinstance(dataclasses.replace(base, flash2_rate={"fwd": 0.5}), Device)


def test_flash2_takes_no_cudnn_head_width_penalty():
    """cuDNN's head-width table (408 / 609 TFLOP/s forward at head width 64 / 128 on H100, FA3 paper Fig. 5) is the
    fused kernel's; FlashAttention-2 is priced at its 0.52 without it (its own column is flatter), so at head width
    64 it is 0.52 / (408/609) = 0.776 of the fused kernel's speed, not 0.52."""
    scn = load_scenario("llama3-8b-h100-8")
    model = dataclasses.replace(scn.model, head_dim=64)
    dev, cal = device("H100-SXM5-80GB"), calibration_for("H100-SXM5-80GB")
    fused = attention_ops(model, scn.plan, "flash")[0]
    fa2 = attention_ops(model, dataclasses.replace(scn.plan, attention="flash2"), "flash")[0]
    assert fused.head_dim == 64
    ratio = compute_time_s(fused, dev, cal) / compute_time_s(fa2, dev, cal)
    assert ratio == pytest.approx(0.52 / (408 / 609), rel=1e-3)


@pytest.mark.parametrize("rate, text", [
    ({"fwd": 0.52, "bwd": 0.62}, "forward 0.52, backward 0.62 of the fused kernel's rate"),
    ({"fwd": 0.5}, "forward 0.50, backward 1.00 of the fused kernel's rate"),
    ({"bwd": 0.6}, "forward 1.00, backward 0.60 of the fused kernel's rate"),
    ({}, "priced as the fused kernel on H100-SXM5-80GB")])
def test_predict_states_the_flash2_rates_it_used(rate, text):
    """A pass the device does not rate runs at the fused kernel's rate (1.00), and says so."""
    base = load_scenario("llama3-8b-h100-8")
    sysm = dataclasses.replace(base.system, device=dataclasses.replace(base.system.device, flash2_rate=rate))
    scn = _with_attention(dataclasses.replace(base, system=sysm), "flash2")
    note = [a for a in predict(scn).assumptions if a.startswith("attention kernel")][0]
    assert f"as FlashAttention-2 ({text})" in note


def test_the_head_width_note_is_the_fused_kernels_only():
    """cuDNN's head-width rates are stated for a 64-wide fused kernel and not for FlashAttention-2, which does not
    take them."""
    base = load_scenario("llama3-8b-h100-8")
    scn = dataclasses.replace(base, model=dataclasses.replace(base.model, head_dim=64))
    notes = {att: [a for a in predict(_with_attention(scn, att)).assumptions if a.startswith("attention kernel")][0]
             for att in ("flash", "flash2")}
    assert "head width 64" in notes["flash"] and "head width" not in notes["flash2"]
