"""A review of the analysis sections against the prediction (fifty-fifth session): each test reproduces one
contradiction it found — offload copies called pipeline traffic "over the network", a ZeRO-3 layer's working set
read from its shard, DualPipe's gradients counted as if every micro-batch ran both stages, the gradient sync's
group of a context-parallel job given as dp alone, a single GPU losing time waiting, the in-network-reduction
what-if labelled a plan change."""
from __future__ import annotations

import pytest

from narrowpath.analysis import analyze
from narrowpath.catalog import load_scenario
from narrowpath.report.prediction import breakdown_label
from tests.analysis.conftest import scenario_from_flags

OFFLOAD = ("system: dgx-h100\nmodel: llama3-8b\nnum_gpus: 8\nplan: {tp: 1, pp: 1, dp: 8, mbs: 1, gbs: 64, "
           "zero_stage: 1, recompute: none, offload_layers: 32, precision: bf16, dp_overlap: true}\n")


@pytest.fixture(scope="module")
def offload(tmp_path_factory):
    path = tmp_path_factory.mktemp("offload") / "offload.yaml"
    path.write_text(OFFLOAD)
    return analyze(scenario_from_flags([str(path)]))


def test_offload_copies_are_named_as_what_they_are(offload):
    """No pipeline here (pp 1): the breakdown's pipeline bucket holds only the activations' copies to host memory
    and back, which the verdict once called "exposed pipeline communication over the network" with no remedy."""
    p = offload.prediction
    host = sum(t.exposed_s for t in p.transfers if t.axis == "host")
    assert host > 1.0 and p.breakdown_s["exposed_pp_comm"] == pytest.approx(host, rel=1e-9)
    assert breakdown_label(p, "exposed_pp_comm") == "exposed activation offload copies (host link)"
    assert offload.verdict.sentence.startswith("The narrowest path is exposed activation offload copies over the "
                                               "host link")
    assert "pipeline" not in offload.verdict.sentence
    wis = {w.change: w for w in offload.verdict.what_ifs}
    assert wis["recompute_offloaded"].status == "faster"  # 32 layers recomputed instead of copied
    assert wis["recompute_offloaded"].scenario.plan.offload_layers == 0
    # the communication budget carries the host link: its exposed time is the breakdown's
    tiers = {t.tier: t for t in offload.communication.tiers}
    assert tiers["host"].exposed_s == pytest.approx(host, rel=1e-9)
    assert tiers["host"].bytes_per_step == pytest.approx(
        {r.level: r for r in offload.data_movement}["host"].bytes_per_step)


def test_a_plan_without_offloading_keeps_the_pipeline_label():
    p = analyze(load_scenario("llama3-70b-h100-256")).prediction
    assert breakdown_label(p, "exposed_pp_comm") == "exposed PP communication"


def test_zero3_working_set_is_the_gathered_layer():
    """Llama-3 8B under ZeRO-3 on 64 GPUs: a layer is 4,096·6,144 + 4,096² + 3·4,096·14,336 + 2·4,096 =
    218,112,000 parameters, gathered whole in BF16 (436.2 MB) before its GEMMs; its gradient 872.4 MB in FP32
    before the reduce-scatter — not a 64th of them (the shard the rank keeps)."""
    a = analyze(scenario_from_flags(["--model", "llama3-8b", "--system", "dgx-h100", "--gpus", "64", "--gbs", "64",
                                     "--zero", "3"]))
    items = {i.item: i for i in a.distance.items}
    layer = 4096 * 6144 + 4096 * 4096 + 3 * 4096 * 14336 + 2 * 4096
    assert layer == 218_112_000
    assert items["weights"].working_set_bytes == pytest.approx(2 * layer)
    assert items["gradients"].working_set_bytes == pytest.approx(4 * layer)


def test_dualpipe_gradients_are_touched_by_half_the_micro_batches_each():
    """DeepSeek-V3 on 2,048 H800 (DualPipe, pp 16, 120 micro-batches): each micro-batch's backward accumulates into
    one of the rank's two stages (weighted by their layers), so the gradients
    are read and written m times in all, plus the sync's and the optimizer's reads: m + 2 = 122, not 2m + 2."""
    a = analyze(load_scenario("deepseek-v3-h800-2048"))
    m = a.prediction.workload.num_microbatches
    assert m == 120
    grads = {i.item: i for i in a.distance.items}["gradients"]
    stages = a.prediction.workload.stages
    crit = a.distance.stage
    p = a.prediction.scenario.plan.pp
    la, lb = stages[crit].layers, stages[p - 1 - crit].layers
    share = (0.5 * la + 0.5 * lb) / (la + lb)
    assert grads.accesses_per_step == pytest.approx(2 * m * share + 2)
    assert grads.accesses_per_step < 2 * m


def test_the_gradient_syncs_group_spans_dp_times_cp():
    """Llama-3 70B with cp 2 and dp 4 (tp 8 a node): the gradient sync runs over the 8 ranks of dp × cp
    (the inventory's group), on 8 nodes; the topology once listed dp's 4."""
    a = analyze(scenario_from_flags(["--model", "llama3-70b", "--system", "dgx-h100", "--gpus", "256", "--tp", "8",
                                     "--pp", "4", "--cp", "2", "--dp", "4", "--gbs", "64"]))
    dp = {x.axis: x for x in a.topology.axes}["dp"]
    sync = [r for r in a.collectives if r.name.startswith("dp.grad_")]
    assert sync and sync[0].group_size == 8
    assert (dp.degree, dp.nodes) == (8, 8)


def test_a_single_gpu_loses_no_time_waiting():
    a = analyze(scenario_from_flags(["--model", "llama3-8b", "--system", "dgx-h100", "--gpus", "1", "--dp", "1",
                                     "--gbs", "8", "--zero", "0"]))
    sim = a.synchronisation.simulated
    assert sim.jitter_wait_s == 0 and sim.lost_time_s_by_cause == () and sim.wait_s_by_collective == ()


def test_in_network_reduction_is_a_fabric_change():
    a = analyze(load_scenario("llama3-405b-h100-16k"))
    assert a.communication.in_network_reduction
    assert all(w.kind == "fabric" for w in a.communication.in_network_reduction)
