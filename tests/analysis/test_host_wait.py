"""The GPU waiting for its host is a path of its own: the verdict splits it from the compute it is priced in, names
it when it is the largest, and tries the changes that remove it (CUDA graphs, sync-free MoE layers, a larger
micro-batch); the console and JSON show it. Expected numbers come from the workload by hand (schedule.test_host_knobs):
a dropless Qwen3-30B-A3B on one DGX B200 syncs once per MoE layer forward, 48 layers x 64 micro-batches x
host_sync_s, and its host issues every pass faster than the GPU runs it."""
from __future__ import annotations

import dataclasses
import json

import pytest

from narrowpath.analysis import analyze
from narrowpath.analysis.analyze import AnalysisOptions, analyze_prediction
from narrowpath.catalog import load_scenario
from narrowpath.cli.main import main
from narrowpath.schedule.step import predict
from tests.cli.one_line import one_line_error
from tests.schedule.test_host_knobs import SYNC_FREE_LAUNCHES_SAVED, _phase_sums, _qwen3_30b, _tiny


@pytest.fixture(scope="module")
def moe():
    return analyze(_qwen3_30b())


def test_host_wait_is_split_from_compute_and_named_the_narrowest_path(moe):
    pred, v = moe.prediction, moe.verdict
    expected = 64 * 48 * pred.calibration.host_sync_s
    assert pred.host_wait_s == pytest.approx(expected, rel=1e-12)
    assert v.components_s["host_wait"] == pytest.approx(expected, rel=1e-12)
    assert sum(v.components_s.values()) == pytest.approx(pred.step_time_s, rel=1e-12)
    # the GPU's own compute is what is left of compute, split by roof
    gpu = pred.breakdown_s["compute"] - expected
    assert v.components_s["matrix_compute"] + v.components_s["hbm_bound_compute"] == pytest.approx(gpu, rel=1e-12)
    # the narrowest path is the largest besides matrix arithmetic: here the memory-bound kernels (3.30 s, the
    # dispatchers' permutations since the fifty-fourth session) just outweigh the 3.07 s of syncs; with a host that
    # takes twice as long to resume after each sync, the wait is the narrowest and the sentence names it
    others = {k: x for k, x in v.components_s.items() if k != "matrix_compute"}
    assert v.narrowest == max(others, key=others.get)
    slow = dataclasses.replace(pred.calibration, host_sync_s=2 * pred.calibration.host_sync_s)
    w = analyze_prediction(predict(_qwen3_30b(), slow), AnalysisOptions(simulate=False, what_ifs=False)).verdict
    assert w.narrowest == "host_wait" and w.components_s["host_wait"] == pytest.approx(2 * expected, rel=1e-12)
    assert "the GPU waiting for the host" in w.sentence


def test_the_remedies_for_the_host_are_tried(moe):
    pred = moe.prediction
    w = {x.change: x for x in moe.verdict.what_ifs}
    free = w["moe_sync_free"]
    assert free.kind == "software" and free.targets == ("host_wait",) and free.status == "faster"
    # every wait here is a sync; the sync-free path also casts each grouped tensor at once (test_host_knobs)
    launches = 64 * 48 * SYNC_FREE_LAUNCHES_SAVED * pred.calibration.kernel_overhead_s
    # the gradient sync's first bucket is ready 1/n into the last backward, which the syncs lengthened: its exposure
    # moves with that backward (schedule.exposure.bucket_tail_s), as in test_host_knobs
    synced = predict(_qwen3_30b(moe_sync_free=True))
    dp = pred.breakdown_s["exposed_dp_comm"] - synced.breakdown_s["exposed_dp_comm"]
    assert free.gain_s == pytest.approx(pred.host_wait_s + launches + dp, rel=1e-9)
    assert "cuda_graphs" not in w  # every wait is a sync: the host issues faster than the GPU runs, nothing to hide
    assert "host_wait" in w["raise_mbs"].targets


def test_a_host_bound_dense_step_is_offered_cuda_graphs():
    a = analyze(_tiny())
    pred = a.prediction
    m = pred.workload.num_microbatches
    by_hand = m * sum(max(0.0, h - g) for g, h, _ in _phase_sums(pred).values())
    assert pred.host_wait_s == pytest.approx(by_hand, rel=1e-12) and by_hand > 0
    w = {x.change: x for x in a.verdict.what_ifs}
    assert w["cuda_graphs"].status == "faster" and w["cuda_graphs"].targets == ("host_wait",)
    assert w["cuda_graphs"].step_s == pytest.approx(predict(_tiny(cuda_graphs=True)).step_time_s, rel=1e-12)
    assert "moe_sync_free" not in w  # a dense model has nothing to sync


def test_no_host_remedy_where_the_gpu_never_waits():
    a = analyze(load_scenario("llama3-70b-h100-256"))
    assert a.prediction.host_wait_s == 0.0 and a.verdict.components_s["host_wait"] == 0.0
    assert not {"cuda_graphs", "moe_sync_free"} & {x.change for x in a.verdict.what_ifs}


def test_full_recompute_plans_get_no_cuda_graphs_what_if():
    a = analyze(_tiny(recompute="full"))
    assert a.prediction.host_wait_s > 0
    changes = {x.change for x in a.verdict.what_ifs}
    assert "cuda_graphs" not in changes  # Megatron-LM refuses graphs beside full recompute (spec.plan)


def test_sync_free_plans_get_no_sync_free_what_if():
    a = analyze(_qwen3_30b(moe_sync_free=True))
    assert a.prediction.host_wait_s == 0.0
    assert "moe_sync_free" not in {x.change for x in a.verdict.what_ifs}


def _write(tmp_path, **plan) -> str:
    p = tmp_path / "q.json"
    body = {"system": "dgx-b200", "num_gpus": 8,
            "model": {"name": "qwen3-30b-a3b", "layers": 48, "hidden": 2048, "heads": 32, "kv_heads": 4,
                      "head_dim": 128, "ffn": 768, "ffn_act": "swiglu", "vocab": 151936, "seq_len": 4096,
                      "experts": 128, "top_k": 8},
            "plan": {"tp": 1, "pp": 1, "dp": 8, "ep": 8, "mbs": 1, "gbs": 512, "zero_stage": 1, "recompute": "none",
                     "precision": "mxfp8", "dp_overlap": True, "moe_routing": "dropless-balanced", **plan}}
    p.write_text(json.dumps(body))
    return str(p)


def test_console_and_json_show_the_wait_and_the_knobs(tmp_path, capsys):
    f = _write(tmp_path)
    assert main(["predict", f]) == 0
    out = capsys.readouterr().out
    waited = predict(_qwen3_30b()).host_wait_s
    assert f"of which the GPU waits for the host    {waited:.4f}" in out
    assert main(["predict", f, "--json", "--moe-sync-free", "--cuda-graphs"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["plan"]["moe_sync_free"] is True and d["plan"]["cuda_graphs"] is True and d["host_wait_s"] == 0.0
    assert main(["predict", f, "--moe-sync-free"]) == 0
    out = capsys.readouterr().out
    assert "moe-sync-free" in out.splitlines()[1] and "waits for the host" not in out


def test_a_knob_that_is_not_a_boolean_is_one_line(tmp_path, capsys):
    one_line_error(capsys, ["predict", _write(tmp_path, cuda_graphs="yes")], "plan.cuda_graphs")


def test_graphs_with_full_recompute_are_refused_in_one_line(tmp_path, capsys):
    one_line_error(capsys, ["predict", _write(tmp_path, recompute="full"), "--cuda-graphs"], "plan.cuda_graphs",
                   "full recompute")


def test_the_html_breakdown_shows_the_wait_apart(moe):
    from narrowpath.report.html_accounts import breakdown_section
    html = breakdown_section(moe)
    pred = moe.prediction
    busy = pred.breakdown_s["compute"] - pred.host_wait_s
    assert "compute (fwd+bwd+recompute): GPU busy" in html and f"{busy:.4f}" in html
    assert f"{pred.breakdown_s['compute']:.4f}" not in html  # compute is not shown whole beside its two parts
    assert "compute: GPU waiting for the host" in html and f"{pred.host_wait_s:.4f}" in html


def test_search_keeps_the_knobs_and_tries_no_full_recompute_beside_graphs(tmp_path, capsys):
    f = _write(tmp_path)
    assert main(["search", f, "--cuda-graphs", "--moe-sync-free", "--space", "basic", "--top", "40", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    plans = [c["plan"] for c in d["best"]]
    assert plans and all(p["cuda_graphs"] and p["moe_sync_free"] for p in plans)
    assert all(p["recompute"] != "full" for p in plans)  # Megatron-LM refuses it beside graphs (spec.plan)
    assert main(["search", f, "--space", "basic", "--top", "1", "--json"]) == 0
    eager = json.loads(capsys.readouterr().out)
    assert d["num_plans"] * 3 == eager["num_plans"] * 2  # the basic space's three recompute modes, less full
    assert main(["search", f, "--cuda-graphs", "--space", "basic", "--top", "1"]) == 0
    assert "CUDA graphs (no full recompute tried)" in capsys.readouterr().out
