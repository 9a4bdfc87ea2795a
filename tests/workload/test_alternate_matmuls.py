"""torchtitan's op-level selective activation checkpointing (recompute module `alternate_matmuls`): the outputs of
every second matmul of a layer in call order are not saved, so those matmuls — and the element-wise ops between
them — run again before backward (torchtitan `_get_custom_policy`: `forward_mm_count % 2 == 0` is not saved).
Shares and FLOPs by hand on Llama-3 8B (hidden 4096, 32 query heads and 8 key/value heads of 128, SwiGLU 14,336)."""
from __future__ import annotations

import dataclasses

import pytest

from narrowpath.catalog import load_scenario
from narrowpath.catalog.resolve import plan_with_stack_defaults
from narrowpath.cost.memory import layer_activation_bytes
from narrowpath.schedule.step import predict
from narrowpath.workload import transformer as T
from narrowpath.workload.build import layer_comm
from narrowpath.workload.recompute import alternate_matmul_shares, recompute_ops

TOKENS = 8192  # llama3-8b-h100-8: mbs 1 × sequence 8192 per rank


def _scn(name="llama3-8b-h100-8", mods=("alternate_matmuls",), rc="selective", **kw):
    s = load_scenario(name)
    return dataclasses.replace(s, plan=dataclasses.replace(s.plan, recompute=rc, recompute_modules=mods, **kw))


def test_shares_follow_the_call_order():
    """Llama-3 8B: wq (1, saved), wk (2, again), wv (3), wo (4, again), w1 (5), w3 (6, again), w2 (7): wk is 1,024 of
    the fused qkv's 4,096 + 1,024 + 1,024 columns = 1/6, wo is the whole attention projection, w3 half of the
    fused up-projection. A GELU MLP (w1, w2) with full multi-head attention: wk = 1/3 of qkv, wo, and w2 (the
    down-projection) instead."""
    llama = load_scenario("llama3-8b-h100-8").model
    assert alternate_matmul_shares(llama) == {"qkv": pytest.approx(1 / 6), "attn_proj": 1.0, "mlp_up": 0.5}
    gpt = load_scenario("gpt3-175b-a100-1024").model
    assert gpt.ffn_act == "gelu" and gpt.kv_heads == gpt.heads
    assert alternate_matmul_shares(gpt) == {"qkv": pytest.approx(1 / 3), "attn_proj": 1.0, "mlp_down": 1.0}


def test_the_matmuls_run_again_at_their_share():
    """Recompute FLOPs of one layer and micro-batch: 2 · tokens · (4096·1024 + 4096·4096 + 4096·14336) =
    2 · 8192 · 79.69 M = 1.3056e12 (wk, wo, w3); the attention core is saved (not run again); the norms, RoPE, the
    activation and the residual adds are."""
    scn = _scn()
    m, plan = scn.model, scn.plan
    assert plan.mbs * m.seq_len == TOKENS and plan.tp == 1
    fwd = T.layer_forward_ops(m, plan, "flash", moe_layer=False)
    again = recompute_ops(fwd, m, plan, "flash", False)
    flop = sum(op.flop for op in again if op.kind == "matrix")
    assert flop == pytest.approx(2 * TOKENS * (4096 * 1024 + 4096 * 4096 + 4096 * 14336), rel=1e-12)
    names = [op.name for op in again]
    assert "flash_attn" not in names and "mlp_down" not in names
    assert {"ln1", "rope", "ln2", "mlp_act", "residual_add"} <= set(names)
    assert all(op.phase == "recompute" for op in again)


def test_memory_sits_between_none_and_full_and_below_the_attention_core_policy():
    """Saving every other matmul's output keeps less than Megatron's selective recompute of the attention core only
    (which keeps every projection's input) and more than recomputing the whole layer."""
    kept = {k: layer_activation_bytes(s, "flash", moe_layer=False) for k, s in
            (("alt", _scn()), ("core", _scn(mods=())), ("none", _scn(mods=(), rc="none")))}
    assert kept["alt"] < 0.6 * kept["core"] <= 0.6 * kept["none"]
    full = predict(_scn(mods=(), rc="full")).memory.total_bytes
    alt = predict(_scn()).memory.total_bytes
    assert full < alt < predict(_scn(mods=())).memory.total_bytes


def test_the_step_pays_for_the_recomputed_matmuls():
    """Llama-3 8B on 8 H100: the op policy costs more time than the attention-core policy (free with flash) and
    less than recomputing whole layers."""
    alt, core, full = (predict(s).step_time_s for s in (_scn(), _scn(mods=()), _scn(mods=(), rc="full")))
    assert core < alt < full


def test_tensor_parallel_blocks_gather_again():
    """With tp > 1 (sequence parallel) wk and wo re-run inside the attention block and w3 inside the MLP block, so
    both blocks' gather and scatter run again in the recompute pass, as under full recompute."""
    scn = _scn("llama3-70b-h100-256")
    assert scn.plan.tp > 1 and scn.plan.sequence_parallel
    again = {t.name: c for t, c in layer_comm(scn, "flash", False) if t.phase == "recompute"}
    full = {t.name: c for t, c in layer_comm(_scn("llama3-70b-h100-256", mods=(), rc="full"), "flash", False)
            if t.phase == "recompute"}
    assert again == full and again["tp.all_gather"] == 2.0


def test_moe_and_mla_layers_are_left_as_they_are():
    ds = _scn("deepseek-v3-h800-2048", activation_cache="default")  # without DeepSeek's FP8 cache (its moe_act)
    none = _scn("deepseek-v3-h800-2048", mods=(), rc="none", activation_cache="default")
    for moe in (True, False):
        fwd = T.layer_forward_ops(ds.model, ds.plan, "flash", moe_layer=moe)
        assert recompute_ops(fwd, ds.model, ds.plan, "flash", False) == []
        assert layer_activation_bytes(ds, "flash", moe_layer=moe) == layer_activation_bytes(none, "flash",
                                                                                          moe_layer=moe)


def test_the_torchtitan_stack_means_it_only_under_selective():
    sel, _, chosen = plan_with_stack_defaults({"dp": 8, "mbs": 1, "gbs": 8, "recompute": "selective",
                                               "framework": "torchtitan"})
    assert sel.recompute_modules == ("alternate_matmuls",) and "recompute_modules" in dict(chosen)
    full, _, chosen = plan_with_stack_defaults({"dp": 8, "mbs": 1, "gbs": 8, "recompute": "full",
                                                "framework": "torchtitan"})
    assert full.recompute_modules == () and "recompute_modules" not in dict(chosen)
    given, _, _ = plan_with_stack_defaults({"dp": 8, "mbs": 1, "gbs": 8, "recompute": "selective",
                                            "recompute_modules": ["core_attn"], "framework": "torchtitan"})
    assert given.recompute_modules == ("core_attn",)


def test_a_shared_gemm_runs_again_at_its_share_of_every_cost():
    """The re-run share of a fused GEMM carries that share of its FLOPs, HBM bytes and weight bytes, and keeps its
    shape (rows, groups) — so a weight-streaming or bandwidth-bound share is priced as the same fraction of the
    GEMM."""
    scn = _scn(precision="fp8")
    m, plan = scn.model, scn.plan
    fwd = {op.name: op for op in T.layer_forward_ops(m, plan, "flash", moe_layer=False)}
    again = {op.name: op for op in recompute_ops(list(fwd.values()), m, plan, "flash", False)
             if op.kind == "matrix"}
    shares = {"qkv": 1 / 6, "attn_proj": 1.0, "mlp_up": 0.5}
    assert set(again) == set(shares)
    assert fwd["mlp_up"].weight_bytes > 0
    for name, f in shares.items():
        a, o = again[name], fwd[name]
        for field in ("flop", "hbm_bytes", "weight_bytes"):
            assert getattr(a, field) == pytest.approx(f * getattr(o, field), rel=1e-12), (name, field)
        assert (a.rows, a.groups, a.dtype) == (o.rows, o.groups, o.dtype)


def _mixtral(mods=("alternate_matmuls",), rc="selective"):
    from narrowpath.catalog import model, system
    from narrowpath.spec import Plan, Scenario
    plan = Plan(tp=2, pp=1, dp=8, ep=8, mbs=1, gbs=32, zero_stage=1, sequence_parallel=True, recompute=rc,
                recompute_modules=mods)
    return Scenario(name="mixtral", system=system("dgx-h100"), model=model("mixtral-8x7b"), plan=plan, num_gpus=16)


def test_an_moe_layer_without_mla_is_left_as_it_is():
    """Mixtral (MoE, grouped-query attention, tp 2): the op policy is defined here for dense layers only, so an MoE
    layer keeps what it keeps without recompute, runs nothing again and gathers nothing again."""
    alt, none = _mixtral(), _mixtral(mods=(), rc="none")
    assert alt.model.moe is not None and alt.model.mla is None
    fwd = T.layer_forward_ops(alt.model, alt.plan, "flash", moe_layer=True)
    assert recompute_ops(fwd, alt.model, alt.plan, "flash", False) == []
    assert layer_activation_bytes(alt, "flash", moe_layer=True) == layer_activation_bytes(none, "flash",
                                                                                           moe_layer=True)
    assert not [t for t, _ in layer_comm(alt, "flash", True) if t.phase == "recompute"]


def test_gelu_keeps_its_first_projection_output_whole():
    """GPT-3 (GELU: wq, wk, wv, wo, w1, w2): w1's output — the activation's input — is saved whole (call 5), the
    down-projection's input is dropped (w2, call 6, runs again with the activation). Kept per layer: the layer
    input (ln1's), the attention core's Q/K/V/O and the activation's input; nothing else (the dropout masks of the
    bias-dropout-adds are replayed)."""
    scn = _scn("gpt3-175b-a100-1024")
    ops = T.layer_forward_ops(scn.model, scn.plan, "flash", moe_layer=False)
    keep = {"ln1", "flash_attn", "mlp_act"}
    want = sum(op.saved_bytes for op in ops if op.name.split(".")[0] in keep)
    assert layer_activation_bytes(scn, "flash", moe_layer=False) == pytest.approx(want, rel=1e-12)
    again = [op.name for op in recompute_ops(ops, scn.model, scn.plan, "flash", False)]
    assert again.count("bias_dropout_add") == 2 and "mlp_down" in again and "mlp_up" not in again


def test_swiglu_keeps_half_the_activation_inputs():
    """Llama-3 8B (SwiGLU): w1's output is saved (call 5), w3's is not (call 6): half the activation's saved
    inputs, with the layer input and the attention core's."""
    scn = _scn()
    ops = T.layer_forward_ops(scn.model, scn.plan, "flash", moe_layer=False)
    saved = {op.name: op.saved_bytes for op in ops}
    want = saved["ln1"] + saved["flash_attn"] + 0.5 * saved["mlp_act"]
    assert layer_activation_bytes(scn, "flash", moe_layer=False) == pytest.approx(want, rel=1e-12)


def test_combined_with_other_modules_their_effects_add():
    """With the unfused core and `core_attn`, the score-sized tensors are dropped too (and the core runs again);
    with `mlp` the dense MLP is checkpointed whole: the activation's inputs are dropped once, not twice, and the
    down-projection runs again whole."""
    scn = _scn(mods=("alternate_matmuls", "core_attn"))
    ops = T.layer_forward_ops(scn.model, scn.plan, "unfused", moe_layer=False)
    keep = {"ln1", "attn_scores"}  # unfused: Q/K/V kept by the scores GEMM; softmax/dropout/AV tensors dropped
    want = sum(op.saved_bytes for op in ops if op.name.split(".")[0] in keep) + 0.5 * sum(
        op.saved_bytes for op in ops if op.name == "mlp_act")
    assert layer_activation_bytes(scn, "unfused", moe_layer=False) == pytest.approx(want, rel=1e-12)
    mlp = _scn(mods=("alternate_matmuls", "mlp"))
    ops = T.layer_forward_ops(mlp.model, mlp.plan, "flash", moe_layer=False)
    want = sum(op.saved_bytes for op in ops if op.name.split(".")[0] in {"ln1", "flash_attn"})
    assert layer_activation_bytes(mlp, "flash", moe_layer=False) == pytest.approx(want, rel=1e-12)
    names = [op.name for op in recompute_ops(ops, mlp.model, mlp.plan, "flash", False)]
    assert "mlp_down" in names and names.count("mlp_up") == 1  # the whole MLP once (its up-projection whole)
