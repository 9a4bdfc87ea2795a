"""Megatron-Core's expert path for a clamped, offset GLU and expert biases (GPT-OSS; workload.moe.expert_path_ops):
the ops it adds, by hand, and what they do to a step."""
from __future__ import annotations

import dataclasses

import pytest

from narrowpath.catalog import model as catalog_model, system
from narrowpath.errors import SpecError
from narrowpath.schedule.step import predict
from narrowpath.spec import Plan, Scenario
from narrowpath.spec.model import Model, MoE
from narrowpath.spec.parse import model_from_dict
from narrowpath.workload.moe import moe_block_ops
from narrowpath.workload.ops import backward_ops
from narrowpath.workload.recompute import kept_bytes, recompute_ops


def _small(**moe) -> tuple[Model, Plan]:
    """hidden 64, 8 experts of 32 (top-2) over ep 2 (4 local), 16 tokens a micro-batch, token-drop at capacity 1:
    exactly 16 · 2 = 32 expert rows on a rank."""
    m = Model(name="tiny-moe", layers=2, hidden=64, heads=4, ffn=32, ffn_act="swiglu", vocab=128, seq_len=16,
              moe=MoE(num_experts=8, top_k=2, expert_ffn=32, **moe))
    p = Plan(tp=1, pp=1, dp=2, ep=2, mbs=1, gbs=2, moe_routing="token-drop")
    return m, p


def _by_name(ops):
    return {op.name: op for op in ops}


def test_a_plain_glu_without_biases_adds_nothing():
    m, p = _small()
    names = [op.name for op in moe_block_ops(m, p)]
    assert "expert_act_clamp" not in names and "expert_bias" not in names


def test_the_clamp_and_the_bias_loop_by_hand():
    """32 rows, expert width 32, hidden 64, 16-bit: the clamp reads and writes 2 · 32 · 32 elements twice (two clamps
    of 32 · 32 in and out, a cat of 2 · 32 · 32 in and out) = 8 · 32 · 32 · 2 B = 16,384 B over 3 kernels, keeps the
    clamps' inputs (2 · 32 · 32 · 2 B = 4,096 B) and syncs the host once (the offset tensor's host-to-device copy);
    the bias loop moves 6 · 32 · 64 · 2 B = 24,576 B over 2 · 4 + 1 = 9 kernels (4 local experts)."""
    m, p = _small(glu_clamp=7.0, expert_bias=True)
    ops = moe_block_ops(m, p)
    names = [op.name for op in ops]
    assert names.index("expert_act_clamp") + 1 == names.index("expert_act")
    assert names.index("expert_bias") > max(i for i, n in enumerate(names) if n.startswith("expert_down"))
    got = _by_name(ops)
    clamp, bias = got["expert_act_clamp"], got["expert_bias"]
    assert (clamp.kind, clamp.phase, clamp.hbm_bytes, clamp.kernels, clamp.saved_bytes, clamp.host_syncs) == \
        ("vector", "fwd", 16_384.0, 3, 4_096.0, 1)
    assert (bias.kind, bias.hbm_bytes, bias.kernels, bias.saved_bytes, bias.host_syncs) == \
        ("vector", 24_576.0, 9, 0.0, 0)
    # each feature alone adds its own op and only that
    clamp_only, bias_only = _by_name(moe_block_ops(*_small(glu_clamp=7.0))), _by_name(moe_block_ops(*_small(
        expert_bias=True)))
    assert "expert_act_clamp" in clamp_only and "expert_bias" not in clamp_only
    assert "expert_bias" in bias_only and "expert_act_clamp" not in bias_only


def test_one_local_expert_adds_its_bias_in_three_kernels():
    """ep 8 over 8 experts: one local expert — b·p, t + b·p and the cat, 2 · 1 + 1 = 3 kernels."""
    m, _ = _small(expert_bias=True)
    p = Plan(tp=1, pp=1, dp=8, ep=8, mbs=1, gbs=8, moe_routing="token-drop")
    assert _by_name(moe_block_ops(m, p))["expert_bias"].kernels == 3


def test_backward_is_the_sources_autograd_graph_without_a_host_sync():
    """The clamp's backward masks each half's gradient and concatenates them: ~15 · 32 · 32 elements · 2 B = 30,720 B
    over 7 kernels; the bias loop's: grad·p and its sum, grad·b and its sum per expert, 6 · 32 · 64 · 2 B = 24,576 B
    over 4 · 4 = 16 kernels; the offset copy is forward only."""
    m, p = _small(glu_clamp=7.0, expert_bias=True)
    bwd = [op for op in backward_ops(moe_block_ops(m, p), p) if op.name in ("expert_act_clamp", "expert_bias")]
    assert [(op.name, op.phase, op.flop, op.hbm_bytes, op.kernels, op.host_syncs) for op in bwd] == \
        [("expert_act_clamp", "bwd", 0.0, 30_720.0, 7, 0), ("expert_bias", "bwd", 0.0, 24_576.0, 16, 0)]


def test_expert_tensor_and_sequence_parallelism_by_hand():
    """tp 2 with sequence parallelism and etp 2 (ep 2 · etp 2 over tp · dp = 4 ranks): a rank owns 16 / 2 = 8 tokens,
    16 copies, and the etp pair gathers its partner's: 32 rows, each of an expert width 32 / 2 = 16 — the clamp
    8 · 32 · 16 · 2 B = 8,192 B, keeping 2 · 32 · 16 · 2 B = 2,048 B; the bias over the whole hidden width, the
    down projection's output being whole on each rank: 6 · 32 · 64 · 2 B = 24,576 B."""
    m, _ = _small(glu_clamp=7.0, expert_bias=True)
    p = Plan(tp=2, pp=1, dp=2, ep=2, etp=2, mbs=1, gbs=2, sequence_parallel=True, moe_routing="token-drop")
    got = _by_name(moe_block_ops(m, p))
    assert (got["expert_act_clamp"].hbm_bytes, got["expert_act_clamp"].saved_bytes) == (8_192.0, 2_048.0)
    assert got["expert_bias"].hbm_bytes == 24_576.0 and got["expert_bias"].kernels == 9


def test_moe_act_recompute_runs_the_clamp_again_and_keeps_only_the_checkpoint_input():
    """Under `moe_act` recompute the clamp runs again before backward (with its host sync) and keeps nothing."""
    m, p = _small(glu_clamp=7.0)
    rc = dataclasses.replace(p, recompute="selective", recompute_modules=("moe_act",))
    fwd = moe_block_ops(m, rc)
    again = _by_name(recompute_ops(fwd, m, rc, "flash", False))
    assert again["expert_act_clamp"].phase == "recompute" and again["expert_act_clamp"].host_syncs == 1
    # the checkpoint around the activation keeps its input (the up projection's output, which expert_act's saved
    # bytes stand for) and drops the clamps' inputs (2 · 32 · 32 · 2 B) and the down projection's input, the
    # activation's output (32 · 32 · 2 B): 4,096 + 2,048 B fewer kept
    assert kept_bytes(fwd, m, p) - kept_bytes(fwd, m, rc) == 6_144.0
    assert "expert_act_clamp" not in [o.name for o in recompute_ops(moe_block_ops(*_small()), m, rc, "flash", False)]


def test_the_moe_module_recompute_runs_both_again_and_keeps_neither():
    """Recomputing the whole MoE layer (`moe`) runs the clamp and the bias loop again and keeps none of their
    inputs."""
    m, p = _small(glu_clamp=7.0, expert_bias=True)
    rc = dataclasses.replace(p, recompute="selective", recompute_modules=("moe",))
    fwd = moe_block_ops(m, rc)
    again = _by_name(recompute_ops(fwd, m, rc, "flash", False))
    assert {"expert_act_clamp", "expert_bias"} <= set(again)
    plain = moe_block_ops(*_small())
    assert kept_bytes(fwd, m, rc) == kept_bytes(plain, _small()[0], rc)


def test_cuda_graphs_keep_a_clamped_expert_path_eager_even_without_dropless_counts():
    """Token-drop routing needs no host copy of the token counts, so under CUDA graphs its experts replay from the
    graph; a clamped GLU's offset copy is a host synchronisation all the same, so its expert path stays eager (its
    kernels issued by the host, at host_dispatch_s each)."""
    from narrowpath.workload.build import layer_ops
    from narrowpath.workload.attention import kernel_of

    gpt = catalog_model("gpt-oss-120b")
    plan = Plan(tp=1, pp=1, dp=64, ep=64, mbs=1, gbs=64, moe_routing="token-drop", cuda_graphs=True)
    for moe, eager in ((dataclasses.replace(gpt.moe, glu_clamp=0.0, expert_bias=False), False), (gpt.moe, True)):
        scn = Scenario(name="g", system=system("gb200-nvl72"), model=dataclasses.replace(gpt, moe=moe), plan=plan,
                       num_gpus=64)
        ops = _by_name(op for op, _ in layer_ops(scn, kernel_of("flash", "flash"), True, False))
        issued = ops["expert_act"].host_kernels
        assert (issued is None or issued > 0) == eager, moe


def test_the_catalog_gpt_oss_pays_one_host_sync_per_layer_forward_and_the_clamp_passes():
    """GPT-OSS-120B on 64 GB200 (ep 64, 5 micro-batches of 4): with its clamp and biases the host waits 36 layers · 5
    micro-batches · host_sync_s more (one offset copy per layer forward, no recompute chosen), and the element-wise
    time grows; GEMMs and attention do not move."""
    gpt = catalog_model("gpt-oss-120b")
    plan = Plan(tp=1, pp=1, dp=64, ep=64, mbs=4, gbs=1280, zero_stage=1, recompute="none")
    scn = Scenario(name="gpt-oss", system=system("gb200-nvl72"), model=gpt, plan=plan, num_gpus=64)
    plain = dataclasses.replace(scn, model=dataclasses.replace(
        gpt, moe=dataclasses.replace(gpt.moe, glu_clamp=0.0, expert_bias=False)))
    a, b = predict(plain), predict(scn)
    m = b.workload.num_microbatches
    assert m == 5
    assert b.host_wait_s - a.host_wait_s == pytest.approx(36 * m * b.calibration.host_sync_s, rel=1e-9)
    ca, cb = a.gpu_time_by_class_s(), b.gpu_time_by_class_s()
    assert cb["gemm"] == ca["gemm"] and cb["attention"] == ca["attention"]
    assert cb["elementwise"] > ca["elementwise"] and b.step_time_s > a.step_time_s


@pytest.mark.parametrize("field, value, message", [("expert_bias", "yes", "must be true or false"),
                                                    ("glu_clamp", -1, "must be a finite number >= 0"),
                                                    ("glu_clamp", 7, "clamps the halves of a gated")])
def test_a_bad_moe_field_is_refused_in_one_line_naming_it(field, value, message):
    """The third: a clamp on a GeLU MLP (the default ffn_act), which has no halves to clamp."""
    with pytest.raises(SpecError, match=f"model.moe.{field}: {message}"):
        model_from_dict({"layers": 2, "hidden": 64, "heads": 4, "ffn": 32, "vocab": 128, "seq_len": 16,
                         "moe": {"num_experts": 8, "top_k": 2, "expert_ffn": 32, field: value}})


def test_the_search_prices_the_path_as_predict_does():
    """GPT-OSS-120B on 64 GB200 with the experts' clamp and biases: random plans of the search's table (across the
    activation strategies, `moe_act` among them) have predict's step time and memory."""
    import numpy as np

    from narrowpath.search import SearchSpace
    from narrowpath.search.bulk import Bulk
    from narrowpath.search.each import scenario_of
    from narrowpath.search.exact import Exact
    from narrowpath.search.parts import Parts
    from narrowpath.search.table import build_table

    gpt = catalog_model("gpt-oss-120b")
    plan = Plan(tp=1, pp=1, dp=64, ep=8, mbs=1, gbs=256, zero_stage=1)
    scn = Scenario(name="gpt-oss", system=system("gb200-nvl72"), model=gpt, plan=plan, num_gpus=64)
    space = SearchSpace(scn.model, scn.system, 64, 256, plan, {"tp": 1, "cp": 1, "mbs": 1, "zero_stage": 1})
    table = build_table(space)
    assert any("moe_act" in table.strategies[int(s)][3] for s in table.cols["strat"])
    rng = np.random.default_rng(34)
    rows = np.sort(rng.choice(table.num_structural, size=min(30, table.num_structural), replace=False))
    bulk = Bulk(table, Parts(scenario_of(scn, space, space.base), None))
    sp = bulk.structural(rows)
    idx, times = Exact(bulk).price_rows(sp, np.arange(rows.size))
    for k in rng.choice(idx.size, size=min(25, idx.size), replace=False):
        pred = predict(scenario_of(scn, space, table.plan(int(idx[k]))))
        at = int(np.searchsorted(rows, int(np.searchsorted(table.starts, idx[k], side="right") - 1)))
        assert times[k] == pytest.approx(pred.step_time_s, rel=1e-12)
        assert sp.memory_bytes[at] == pytest.approx(pred.memory.total_bytes, rel=1e-12)


def test_an_op_that_states_its_own_backward_gets_it_others_the_2x_rule():
    """Op.bwd_bytes / Op.bwd_kernels replace the element-wise rule (2x the bytes, as many launches, at least one) only
    for the op that states them; a stated zero is kept (not read as 'unstated')."""
    import dataclasses
    from narrowpath.workload.ops import vector
    plain = vector("x", "fwd", 100.0, "bf16", kernels=3)
    own = dataclasses.replace(plain, bwd_bytes=50.0, bwd_kernels=1)
    free = dataclasses.replace(plain, bwd_bytes=0.0, bwd_kernels=0)
    launchless = vector("y", "fwd", 100.0, "bf16", kernels=0)
    got = [(op.hbm_bytes, op.kernels) for op in backward_ops([plain, own, free, launchless])]
    assert got == [(200.0, 3), (50.0, 1), (0.0, 0), (200.0, 1)]
