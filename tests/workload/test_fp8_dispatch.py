"""DeepSeek-V3's low-precision MoE exchange (§3.3.2 "Low-Precision Communication"; plan.ep_dispatch_format fp8):
the dispatched tokens — and, in backward, the combine's gradient on its way to the down-projection — cross in FP8
with one FP32 scale per 128 values; the forward combine and the dispatch's gradient stay BF16. Worked by hand for
Mixtral 8x7B (h 4096, top 2, s 4096) and checked end to end on the DeepSeek-V3 2,048-H800 scenario."""
from __future__ import annotations

import dataclasses
import json

import pytest

from narrowpath.catalog import load_scenario, model
from narrowpath.cli.main import main
from narrowpath.errors import SpecError
from narrowpath.schedule.step import predict
from narrowpath.spec import Plan
from narrowpath.workload.moe import moe_transfers
from narrowpath.workload.precision import FP8_DISPATCH_BYTES, dispatch_bytes

MIXTRAL = model("mixtral-8x7b")
COPIES = 4096 * 2 * 4096  # tokens · top-k · hidden of one micro-batch on one rank


def P(**kw) -> Plan:
    return Plan(gbs=kw.get("dp", 1) * kw.get("mbs", 1), **kw)


def _rows(xf):
    return [(t.name, t.op, t.axis, t.phase, t.message_bytes, c) for t, c in xf]


def test_fp8_dispatch_bytes_are_the_value_and_a_fp32_scale_per_128():
    assert FP8_DISPATCH_BYTES == 1.03125
    assert dispatch_bytes(P(precision="fp8", ep_dispatch_format="fp8")) == 1.03125
    assert dispatch_bytes(P(precision="fp8")) == 2.0
    assert dispatch_bytes(P(precision="fp32")) == 4.0


def test_an_all_to_all_pass_sends_fp8_one_way_and_bf16_the_other():
    """Per pass (forward, backward, a full recompute's forward): one all-to-all of 4096·2·4096·1.03125 =
    34,603,008 B and one of 67,108,864 B, once each, instead of the 16-bit one twice."""
    xf = moe_transfers(MIXTRAL, P(dp=8, ep=8, precision="fp8", ep_dispatch_format="fp8", recompute="full"))
    assert _rows(xf) == [r for ph in ("fwd", "bwd", "recompute") for r in (
        ("ep.dispatch", "all_to_all", "ep", ph, 34_603_008, 1.0),
        ("ep.combine", "all_to_all", "ep", ph, 67_108_864, 1.0))]
    plain = moe_transfers(MIXTRAL, P(dp=8, ep=8, precision="fp8", recompute="full"))
    assert _rows(plain) == [("ep.dispatch_combine", "all_to_all", "ep", ph, 67_108_864, 2.0)
                            for ph in ("fwd", "bwd", "recompute")]
    sent = sum(t.message_bytes * c for t, c in xf)
    assert sent / sum(t.message_bytes * c for t, c in plain) == pytest.approx((1.03125 + 2) / 4)


def test_both_legs_of_a_deduplicating_dispatch_send_fp8_and_combine_bf16():
    """2 domains of 4 ranks, top 2: a token reaches 2·(1 − (1/2)²) = 1.5 domains, 0.75 of them remote; the
    scale-out leg's nccl-tests size is 4096·0.75·4096·2 (÷ (D − 1)/D) elements, the NVLink leg's every copy."""
    fp8 = P(dp=8, ep=8, precision="mxfp8", ep_dispatch="dedup", ep_dispatch_format="fp8")
    xf = moe_transfers(MIXTRAL, fp8, ep_domains=2, ep_per_domain=4)
    inter, intra = 4096 * 0.75 * 4096 * 2, COPIES
    assert _rows(xf) == [r for ph in ("fwd", "bwd") for r in (
        ("ep.dispatch_internode", "all_to_all", "ep_inter", ph, pytest.approx(inter * 1.03125), 1.0),
        ("ep.combine_internode", "all_to_all", "ep_inter", ph, pytest.approx(inter * 2), 1.0),
        ("ep.dispatch_intranode", "all_to_all", "ep_intra", ph, pytest.approx(intra * 1.03125), 1.0),
        ("ep.combine_intranode", "all_to_all", "ep_intra", ph, pytest.approx(intra * 2), 1.0))]


def test_the_expert_tp_gather_moves_the_fp8_copies_and_the_scatter_bf16():
    xf = moe_transfers(MIXTRAL, P(tp=2, dp=4, ep=4, etp=2, sequence_parallel=True, precision="fp8",
                                  ep_dispatch_format="fp8"))
    etp = {(t.name, t.phase): t.message_bytes for t, _ in xf if t.axis == "etp"}
    gathered = 2048 * 2 * 2 * 4096
    assert etp[("ep.expert_tp_all_gather", "fwd")] == gathered * 1.03125
    assert etp[("ep.expert_tp_reduce_scatter", "bwd")] == gathered * 2
    # without expert parallelism nothing is dispatched: the etp gather moves the 16-bit copies, as the casts stay
    alone = moe_transfers(MIXTRAL, P(tp=2, dp=4, etp=2, sequence_parallel=True, precision="fp8",
                                     ep_dispatch_format="fp8"))
    assert {t.name: t.message_bytes for t, _ in alone if t.phase == "fwd"} == {
        "ep.expert_tp_all_gather": gathered * 2, "ep.expert_tp_reduce_scatter": gathered * 2}


@pytest.mark.parametrize("precision", ["bf16", "fp16", "fp32"])
def test_fp8_dispatch_needs_a_low_precision_recipe(precision):
    with pytest.raises(SpecError, match=r"plan.ep_dispatch_format: fp8 dispatches .* got precision"):
        P(dp=8, ep=8, precision=precision, ep_dispatch_format="fp8")
    with pytest.raises(SpecError, match=r"plan.ep_dispatch_format"):
        P(dp=8, ep=8, precision="fp8", ep_dispatch_format="e5m2")


def test_deepseek_v3_scenario_runs_its_published_fp8_dispatch():
    """The 2,048-H800 scenario states DeepSeek's exchange; priced in 16 bit its DualPipe pairs no longer cover the
    exposed part, so the 16-bit step is slower by more than the bytes saved on the hidden part alone would say —
    and never faster, since every exchange moves fewer bytes."""
    scn = load_scenario("deepseek-v3-h800-2048")
    assert scn.plan.ep_dispatch_format == "fp8"
    fp8 = predict(scn)
    bf16 = predict(dataclasses.replace(scn, plan=dataclasses.replace(scn.plan, ep_dispatch_format="default")))
    assert fp8.step_time_s < bf16.step_time_s
    names = {t.name for t in fp8.transfers if t.axis.startswith("ep")}
    assert names == {"ep.dispatch_internode", "ep.combine_internode", "ep.dispatch_intranode",
                     "ep.combine_intranode", "ep.token_counts"}
    each = {t.name: t.time_each_s for t in fp8.transfers if t.phase == "fwd"}
    assert each["ep.dispatch_internode"] < each["ep.combine_internode"]


def test_cli_flag_json_and_what_if(capsys):
    assert main(["predict", "deepseek-v3-h800-2048", "--ep-dispatch-format", "default", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["plan"]["ep_dispatch_format"] == "default"
    assert main(["predict", "deepseek-v3-h800-2048", "--json"]) == 0
    fp8 = json.loads(capsys.readouterr().out)
    assert fp8["plan"]["ep_dispatch_format"] == "fp8" and fp8["step_time_s"] < out["step_time_s"]
    # analyze offers the FP8 exchange where the plan sends 16 bit on a low-precision recipe, not where it is on
    assert main(["analyze", "deepseek-v3-h800-2048", "--ep-dispatch-format", "default", "--json"]) == 0
    text = capsys.readouterr().out
    assert "fp8_dispatch" in text
    assert main(["analyze", "deepseek-v3-h800-2048", "--json"]) == 0
    assert "fp8_dispatch" not in capsys.readouterr().out


def test_cli_refuses_fp8_dispatch_on_a_bf16_run_in_one_line(capsys):
    assert main(["predict", "deepseek-v3-h800-2048", "--precision", "bf16", "--activation-cache", "default"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "plan.ep_dispatch_format" in err[0]


def _casts(plan):
    from narrowpath.workload.moe import moe_block_ops
    from narrowpath.workload.ops import backward_ops
    fwd = moe_block_ops(MIXTRAL, plan)
    return {o.name: o for o in fwd + backward_ops(fwd, plan) if "quantize" in o.name}


def test_an_fp8_dispatch_quantizes_each_token_once_where_it_is_sent():
    """DeepSeek-V3 quantizes a token before dispatching it and the combine's gradient before sending it back, so the
    experts' input cast and the down projection's output-gradient cast run on the rank's 4,096 tokens, one launch
    each, not on its 8,377 routed copies (top 2 × the busiest rank's share) expert by expert; a per-tensor FP8
    weight gradient then transposes the received copies (read and write a byte each, as after a gather). The other
    two casts (the SwiGLU output, the up projection's output gradient) stay on the copies. Block-scaled recipes
    keep every cast on the copies: the one FP8 copy sent cannot give their column-wise one."""
    from narrowpath.workload.moe import expert_rows, fp8_dispatch_ways
    plan = P(dp=8, ep=8, precision="fp8", ep_dispatch_format="fp8")
    rows = expert_rows(MIXTRAL, plan)
    assert fp8_dispatch_ways(MIXTRAL, plan, rows) == pytest.approx(rows / 4096)
    sent, plain = _casts(plan), _casts(P(dp=8, ep=8, precision="fp8"))
    for name in ("expert_up.quantize", "expert_down.grad_quantize"):
        assert sent[name].transpose_bytes == pytest.approx(2 * rows * 4096)  # the received copies transposed
        assert sent[name].hbm_bytes - sent[name].transpose_bytes == pytest.approx(
            (plain[name].hbm_bytes - plain[name].transpose_bytes) * 4096 / rows)  # the row-wise cast on the tokens
        assert sent[name].hbm_bytes < plain[name].hbm_bytes
    for name in ("expert_down.quantize", "expert_up.grad_quantize"):
        assert sent[name].hbm_bytes == plain[name].hbm_bytes
    block = P(dp=8, ep=8, precision="mxfp8", ep_dispatch_format="fp8")
    assert fp8_dispatch_ways(MIXTRAL, block, rows) == 1.0
    assert {k: o.hbm_bytes for k, o in _casts(block).items()} == {
        k: o.hbm_bytes for k, o in _casts(P(dp=8, ep=8, precision="mxfp8")).items()}
    assert fp8_dispatch_ways(MIXTRAL, P(precision="fp8", ep_dispatch_format="fp8"), rows) == 1.0  # no dispatch


def test_the_cast_before_an_exchange_is_one_launch_not_one_per_expert():
    """Qwen3-30B-A3B's 128 experts on ep 8: 16 local experts, whose copies Transformer Engine's split_quantize casts
    expert by expert (4 launches each under per-tensor FP8 current scaling: the amax zeroed, the amax, the scale,
    the cast); cast once per token before the FP8 dispatch, it is one cast of 4 launches."""
    from narrowpath.spec.parse import model_from_dict
    from narrowpath.workload.moe import moe_block_ops
    from narrowpath.workload.ops import backward_ops
    m = model_from_dict(dict(name="qwen3-30b-a3b-like", layers=48, hidden=2048, heads=32, kv_heads=4, head_dim=128,
                             ffn=768, vocab=151936, seq_len=4096, experts=128, top_k=8,
                             ffn_act="swiglu"))
    for fmt, launches in (("default", 64), ("fp8", 4)):
        plan = P(dp=8, ep=8, precision="fp8", ep_dispatch_format=fmt)
        fwd = moe_block_ops(m, plan)
        ops = {o.name: o for o in fwd + backward_ops(fwd, plan)}
        assert ops["expert_up.quantize"].kernels == ops["expert_down.grad_quantize"].kernels == launches
        assert ops["expert_down.quantize"].kernels == ops["expert_up.grad_quantize"].kernels == 64



def test_a_top_1_router_sends_about_one_copy_a_token():
    """With one expert a token (Switch-style top 1), dropless: the busiest rank's rows are the tokens times its
    share, 1 + √(2·ln 8 / 4096) = 1.0319 — the cast runs on the tokens sent all the same."""
    from narrowpath.workload.moe import expert_rows, fp8_dispatch_ways
    top1 = dataclasses.replace(MIXTRAL, moe=dataclasses.replace(MIXTRAL.moe, top_k=1))
    plan = P(dp=8, ep=8, precision="fp8", ep_dispatch_format="fp8")
    assert fp8_dispatch_ways(top1, plan, expert_rows(top1, plan)) == pytest.approx(1.0318646, abs=1e-7)
