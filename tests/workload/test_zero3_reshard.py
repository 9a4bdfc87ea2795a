"""ZeRO-3 that keeps its gathered weights through the step (`plan.zero3_reshard`): FSDP2 with
reshard_after_forward=False and gradient sync on the last micro-batch only, as torchtitan runs it under pipeline
parallelism ('For PP, do not reshard after forward to avoid per-microbatch all-gathers'; torch.distributed.pipelining
backward_maybe_with_nosync). Per step it gathers each weight once and reduce-scatters each gradient once — ZeRO-1's
traffic — and holds the stage's full 16-bit weights and gradients; `always` (the default) keeps the per-micro-batch
gather before forward and backward and reduce-scatter after backward."""
from __future__ import annotations

import dataclasses

import pytest

from narrowpath.catalog import load_scenario
from narrowpath.cli.main import main
from narrowpath.schedule.step import predict
from narrowpath.spec.plan import Plan
from narrowpath.workload.build import build_workload


def _pp_fsdp(reshard: str, zero: int = 3):
    """Llama-3 70B on 256 H100, tp 8 × pp 4 × dp 8, 16 micro-batches per step."""
    base = load_scenario("llama3-70b-h100-256")
    plan = dataclasses.replace(base.plan, tp=8, pp=4, vpp=1, dp=8, mbs=1, gbs=128, zero_stage=zero,
                               zero3_reshard=reshard, fp8_params=False)
    return dataclasses.replace(base, plan=plan)


def _names(wl) -> dict[str, float]:
    out: dict[str, float] = {}
    for st in wl.stages:
        for tr, c in st.transfers:
            out[tr.name] = out.get(tr.name, 0.0) + c
    for tr, c in wl.step_transfers:
        out[tr.name] = out.get(tr.name, 0.0) + c
    return out


@pytest.mark.parametrize("reshard, pp, per_step", [("always", 4, False), ("unless_pp", 4, True), ("never", 4, True),
                                                   ("unless_pp", 1, False), ("never", 1, True)])
def test_when_zero3_keeps_its_weights_gathered(reshard, pp, per_step):
    plan = Plan(tp=1, pp=pp, dp=8, mbs=1, gbs=64, zero_stage=3, zero3_reshard=reshard)
    assert plan.zero3_per_step is per_step
    assert plan.comm_zero_stage == (1 if per_step else 3)
    # only ZeRO-3 has weights to keep
    assert Plan(tp=1, pp=pp, dp=8, mbs=1, gbs=64, zero_stage=1, zero3_reshard=reshard).comm_zero_stage == 1


def test_kept_gathered_zero3_moves_zero1_traffic_once_per_step():
    """Per micro-batch ZeRO-3 gathers twice and reduce-scatters once per layer and micro-batch; kept gathered it has
    none of those, and instead the once-per-step gradient reduce-scatter and weight all-gather of ZeRO-1 — the same
    transfers, byte for byte, as the plan with zero_stage 1."""
    always = build_workload(_pp_fsdp("always"), "flash")
    kept = build_workload(_pp_fsdp("unless_pp"), "flash")
    zero1 = build_workload(_pp_fsdp("always", zero=1), "flash")
    a, k = _names(always), _names(kept)
    assert a["dp.zero3_param_all_gather"] > 0 and a["dp.zero3_grad_reduce_scatter"] > 0
    assert "dp.zero3_param_all_gather" not in k and "dp.zero3_grad_reduce_scatter" not in k
    assert k["dp.grad_reduce_scatter"] == 1.0 and k["dp.param_all_gather"] == 1.0
    assert kept.step_transfers == zero1.step_transfers
    assert [st.transfers for st in kept.stages] == [st.transfers for st in zero1.stages]


def test_kept_gathered_zero3_is_faster_under_pipelining_and_holds_more_memory():
    """16 micro-batches of per-micro-batch gathers over InfiniBand cost far more than one gather per step; keeping
    the stage's 16-bit weights and gradients costs memory: the same bytes as the ZeRO-1 plan."""
    always, kept, zero1 = (predict(_pp_fsdp("always")), predict(_pp_fsdp("unless_pp")),
                           predict(_pp_fsdp("always", zero=1)))
    assert kept.step_time_s < always.step_time_s
    assert kept.memory.total_bytes > always.memory.total_bytes
    assert kept.memory.total_bytes == pytest.approx(zero1.memory.total_bytes, rel=1e-12)
    assert kept.step_time_s == pytest.approx(zero1.step_time_s, rel=1e-12)


def test_bad_zero3_reshard_is_one_line(tmp_path, capsys):
    f = tmp_path / "s.yaml"
    f.write_text("model: llama3-8b\nsystem: dgx-h100\nnum_gpus: 8\n"
                 "plan: {dp: 8, mbs: 1, gbs: 8, zero_stage: 3, zero3_reshard: sometimes}\n")
    assert main(["predict", str(f)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "plan.zero3_reshard" in err and "sometimes" in err


def test_torchtitan_stack_fills_its_defaults():
    """A plan naming torchtitan takes FSDP2 (ZeRO-3) kept gathered under pipelining, overlapped, fp32 gradient
    reduction and FlashAttention-2, each printed as the stack's choice; a knob the file gives is kept."""
    from narrowpath.catalog.resolve import plan_with_stack_defaults
    plan, _, chosen = plan_with_stack_defaults({"dp": 8, "mbs": 1, "gbs": 8, "framework": "torchtitan (FSDP2)",
                                                "attention": "flash"})
    assert (plan.zero_stage, plan.zero3_reshard, plan.dp_overlap, plan.grad_precision, plan.attention) == \
        (3, "unless_pp", True, "fp32", "flash")
    assert dict(chosen)["zero3_reshard"].endswith("default of the torchtitan stack")
    assert "attention" not in dict(chosen)


def test_search_keeps_the_reshard_policy_and_the_simulator_follows_predict():
    """A search starting from a kept-gathered plan searches under the same policy (the bulk engine prices each
    plan's comm_zero_stage: tests/search/test_bulk.py); the event simulator prices the plan as predict does (noise
    free, within its usual 1 % of the closed form)."""
    from narrowpath.schedule.sim import simulate
    from narrowpath.search import SearchSpace
    scn = _pp_fsdp("unless_pp")
    space = SearchSpace(scn.model, scn.system, scn.num_gpus, scn.plan.gbs, scn.plan, {"tp": 8, "pp": 4})
    assert space.base.zero3_reshard == "unless_pp"
    sim = simulate(scn, steps=1).noise_free_step_time_s
    assert sim == pytest.approx(predict(scn).step_time_s, rel=0.01)
    assert sim < simulate(_pp_fsdp("always"), steps=1).noise_free_step_time_s


def test_kept_gathered_fp8_weights_are_quantized_once_per_step():
    """Under an FP8 recipe, ZeRO-3 re-quantizes the weights it gathers every micro-batch (nothing cached); kept
    gathered, the weights are quantized once per step after the update and cached (ZeRO-1's pattern)."""
    def ops(reshard):
        scn = _pp_fsdp(reshard)
        scn = dataclasses.replace(scn, plan=dataclasses.replace(scn.plan, precision="fp8"))
        wl = build_workload(scn, "flash")
        per_mb = sum(c for st in wl.stages for op, c in st.ops if op.name == "weight_quantize" and op.phase == "fwd")
        per_step = sum(c for op, c in wl.optimizer_ops if op.name == "weight_quantize")
        return per_mb, per_step
    assert ops("always")[0] > 0 and ops("always")[1] == 0
    assert ops("unless_pp") == (0, 1.0)


def test_torchtitan_stack_default_attention_is_flash2():
    from narrowpath.catalog.resolve import plan_with_stack_defaults
    plan, _, chosen = plan_with_stack_defaults({"dp": 8, "mbs": 1, "gbs": 8, "framework": "torchtitan"})
    assert plan.attention == "flash2" and dict(chosen)["attention"].startswith("'flash2'")


def test_cli_flags_reach_the_plan(capsys):
    import json
    args = ["predict", "llama3-70b-h100-256", "--tp", "8", "--pp", "4", "--zero", "3", "--json"]
    times = {}
    for reshard in ("always", "unless_pp"):
        assert main(args + ["--zero3-reshard", reshard, "--attention", "flash2"]) == 0
        out = json.loads(capsys.readouterr().out)
        assert out["plan"]["zero3_reshard"] == reshard and out["plan"]["attention"] == "flash2"
        times[reshard] = out["step_time_s"]
    assert times["unless_pp"] < times["always"]
