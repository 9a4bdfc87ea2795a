"""DeepSeek-V3's low-precision storage (plan.activation_cache `fp8`, DeepSeek-AI 2024 §3.3.2) and 16-bit Adam
moments (plan.optimizer_moments `bf16`, §3.3.2; Megatron-Core's precision-aware optimizer), by hand on the
DeepSeek-V3 catalog scenario (FP8, mbs 1, seq 4096, tp 1, 128 heads of value size 128, experts of inner size 2048)
and on Llama-3 8B. The published 2,048-H800 plan must fit in 80 GB with the report's own savings."""
from __future__ import annotations

import dataclasses
import math
import subprocess
import sys

import pytest

from narrowpath.catalog import load_scenario
from narrowpath.cost.memory import layer_activation_bytes
from narrowpath.errors import SpecError
from narrowpath.schedule.step import predict
from narrowpath.spec.plan import Plan
from narrowpath.workload import transformer as T
from narrowpath.workload.build import layer_ops, optimizer_ops
from narrowpath.workload.moe import expert_rows

TOKENS = 4096
O_ELEMENTS = TOKENS * 128 * 128  # attention output: tokens × heads × value size
ATTN_SAVING = O_ELEMENTS * (2 - 1.5) + TOKENS * 16384 * 1
"""O kept in E5M6 (1.5 B) instead of BF16 (2 B) by the core, and the output projection no longer keeps its own FP8
copy of the same 4096 × 16384 input (1 B): 33,554,432 + 67,108,864 B."""


def _ds(cache: str = "fp8", rc: str = "none", **kw):
    s = load_scenario("deepseek-v3-h800-2048")
    plan = dataclasses.replace(s.plan, recompute=rc, recompute_modules=(), activation_cache=cache, **kw)
    return dataclasses.replace(s, plan=plan)


def _kept(scn, moe_layer: bool) -> float:
    return layer_activation_bytes(scn, "flash", moe_layer=moe_layer)


def test_attention_output_is_kept_once_in_e5m6():
    """A dense layer (DeepSeek-V3's first three) saves only on attention: 100,663,296 B per micro-batch."""
    assert ATTN_SAVING == 100_663_296
    assert _kept(_ds("default"), False) - _kept(_ds("fp8"), False) == pytest.approx(ATTN_SAVING)
    fwd = {op.name: op for op in T.layer_forward_ops(_ds().model, _ds().plan, "flash", moe_layer=False)}
    assert fwd["attn_proj"].saved_bytes == 0.0
    lse = 4 * 128 * TOKENS
    qkv = TOKENS * 128 * (192 + 192 + 128) * 2
    assert fwd["flash_attn"].saved_bytes == pytest.approx(qkv + O_ELEMENTS * 1.5 + lse)


def test_moe_layer_caches_the_swiglu_input_in_fp8_and_drops_its_output():
    """An MoE layer also keeps the experts' SwiGLU input (2 branches × rows × 2048) in 1 byte instead of 2, and no
    longer keeps the down-projection's FP8 input (rows × 2048 × 1 B), which the recomputed SwiGLU rebuilds."""
    scn = _ds()
    rows = expert_rows(scn.model, scn.plan)
    assert rows == pytest.approx(TOKENS * 8 * (1 + math.sqrt(2 * math.log(64) / (TOKENS * 8))))
    saving = ATTN_SAVING + rows * 2048 * (2 * (2 - 1) + 1)
    assert _kept(_ds("default"), True) - _kept(scn, True) == pytest.approx(saving)


def test_the_swiglu_runs_again_before_backward_even_without_recompute():
    """Under `fp8` the SwiGLU output is recomputed (and re-quantized for the down-projection) whatever the recompute
    mode but full, which recomputes the whole layer anyway; a dense layer's MLP is not touched (§3.3.2 names the
    MoE SwiGLU)."""
    again = sorted(op.name for op, _ in layer_ops(_ds(), "flash", True) if op.phase == "recompute")
    assert again == ["expert_act", "expert_down.quantize"]
    assert not [op for op, _ in layer_ops(_ds(), "flash", False) if op.phase == "recompute"]
    assert not [op for op, _ in layer_ops(_ds("default"), "flash", True) if op.phase == "recompute"]
    full = [op.name for op, _ in layer_ops(_ds(rc="full"), "flash", True) if op.phase == "recompute"]
    assert full.count("expert_act") == 1  # once, as part of the whole layer


def test_the_activation_kernel_writes_the_fp8_copy():
    """Fused SwiGLU reads 2 branches and writes 1 output in BF16 (3 × 2 B per element); the cache adds the FP8 copy
    of its 2 input branches (2 × 1 B)."""
    rows = expert_rows(_ds().model, _ds().plan)
    elements = rows * 2048
    act = {op.name: op for op in T.layer_forward_ops(_ds().model, _ds().plan, "flash", moe_layer=True)}["expert_act"]
    assert act.hbm_bytes == pytest.approx(elements * (3 * 2 + 2 * 1))
    assert act.saved_bytes == pytest.approx(elements * 2 * 1)


def test_bf16_moments_hold_8_bytes_per_parameter_instead_of_12():
    """ZeRO §3's K = 12 (fp32 master, m, v) becomes 4 + 2 + 2 = 8; a fp32 run's 8 (m, v) becomes 4."""
    scn = load_scenario("llama3-8b-h100-8")
    for precision, (k32, k16) in (("bf16", (12, 8)), ("fp32", (8, 4))):
        plans = [dataclasses.replace(scn.plan, precision=precision, optimizer_moments=m) for m in ("fp32", "bf16")]
        opt = [predict(dataclasses.replace(scn, plan=p)).memory.items["optimizer_state"] for p in plans]
        assert opt[1] / opt[0] == pytest.approx(k16 / k32)


def test_the_optimizer_step_moves_fewer_moment_bytes():
    """Adam reads the gradient (4 B), reads and writes master + moments (2 × 12 B, or 2 × 8 B), writes the BF16
    weight (2 B) and reads the gradient again for its norm (4 B): 34 B per parameter, 26 B with BF16 moments."""
    moved = [optimizer_ops(Plan(optimizer_moments=m), 1e9, 0.0)[0][0].hbm_bytes for m in ("fp32", "bf16")]
    assert moved == [pytest.approx(34e9), pytest.approx(26e9)]


def test_the_published_2048_h800_plan_fits_with_the_reports_own_savings():
    """DeepSeek-V3 trained with DualPipe over pp 16, ep 64, no tensor parallelism on 80 GB H800s (§3.2-3.3): two
    parameter copies per rank and PP + 1 micro-batches in flight. With §3.3.2's savings (RMSNorm and MLA
    up-projection recompute, E5M6/FP8 caching, BF16 moments) the busiest rank fits; without the FP8 caching, or
    without the recompute, it does not. Under 1F1B (one copy, p − s micro-batches on stage s) it fits either way."""
    s = load_scenario("deepseek-v3-h800-2048")
    assert s.plan.pipeline_schedule == "dualpipe"
    assert predict(s).memory.fits

    def fits(**kw) -> bool:
        return predict(dataclasses.replace(s, plan=dataclasses.replace(s.plan, **kw))).memory.fits

    assert not fits(activation_cache="default")
    assert not fits(recompute="none", recompute_modules=())
    assert fits(activation_cache="default", optimizer_moments="fp32", pipeline_schedule="auto")


def test_fp8_cache_needs_a_low_precision_recipe():
    with pytest.raises(SpecError, match="plan.activation_cache"):
        Plan(activation_cache="fp8", precision="bf16")
    with pytest.raises(SpecError, match="plan.optimizer_moments"):
        Plan(optimizer_moments="fp8")
    with pytest.raises(SpecError, match="plan.activation_cache"):
        Plan(activation_cache="e5m6", precision="fp8")


def test_cli_refuses_an_fp8_cache_on_a_bf16_plan_in_one_line():
    r = subprocess.run([sys.executable, "-m", "narrowpath", "predict", "llama3-8b-h100-8", "--activation-cache", "fp8"],
                       capture_output=True, text=True, timeout=120)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and "plan.activation_cache" in lines[0], r.stderr


def test_partial_full_recompute_is_refused_with_the_cache():
    """The layers a block recompute leaves alone would drop the down-projection input without re-running their
    SwiGLU: refused in one line rather than mispriced; the chooser and the search do not offer it."""
    from narrowpath.schedule.choose import activation_patches
    with pytest.raises(SpecError, match="plan.recompute_layers"):
        Plan(precision="fp8", activation_cache="fp8", recompute="full", recompute_layers=2)
    assert not [p for p in activation_patches(8, "fp8") if p.get("recompute_layers")]
    assert [p for p in activation_patches(8) if p.get("recompute_layers")]


def test_the_mtp_module_recomputes_what_its_memory_drops():
    """DeepSeek-V3's multi-token-prediction module is a full MoE layer on the last stage: under the cache it drops
    the down-projection input like every other MoE layer, so its SwiGLU runs again too (once per MTP depth)."""
    from narrowpath.workload.build import build_workload
    scn = _ds()
    wl = build_workload(scn, "flash")
    last = wl.stages[-1]
    moe_layers = sum(1 for li in range(scn.model.layers) if scn.model.is_moe_layer(li)
                     and li >= scn.model.layers - last.layers)
    again = sum(c for op, c in last.ops if op.phase == "recompute" and op.name == "expert_act")
    assert again == pytest.approx(moe_layers + scn.model.mtp_layers)


def test_offload_moves_what_a_layer_keeps_after_the_caches_drop():
    """Offloading copies a layer's kept activations: under the cache, without the down-projection input."""
    from narrowpath.workload.build import stage_saved_bytes
    scn = _ds()
    li = scn.model.layers - 1
    kind_of = {li: (scn.model.is_moe_layer(li), scn.model.is_window_layer(li))}
    assert stage_saved_bytes(scn, "flash", [li], kind_of) == pytest.approx(_kept(scn, True))
    assert stage_saved_bytes(_ds("default"), "flash", [li], kind_of) == pytest.approx(_kept(_ds("default"), True))


def test_checkpoint_holds_the_smaller_optimizer_state():
    """A checkpoint writes the 16-bit weights and the optimizer state: 2 + 12 bytes per parameter, 2 + 8 with BF16
    moments."""
    from narrowpath.analysis.checkpoint import checkpoint_bytes
    assert checkpoint_bytes(1e9, Plan(precision="bf16")) == pytest.approx(14e9)
    assert checkpoint_bytes(1e9, Plan(precision="bf16", optimizer_moments="bf16")) == pytest.approx(10e9)
