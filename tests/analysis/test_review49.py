"""From the forty-ninth session's independent review of the analysis and its report: what-ifs and sentences an
engineer acts on, each re-checked against predict of the change."""
from __future__ import annotations

import dataclasses

import pytest

from narrowpath.analysis import analyze, remedies
from narrowpath.analysis.analyze import analyze_prediction
from narrowpath.analysis.compare import BUCKET_AXES, compare
from narrowpath.analysis.context import build_context, components
from narrowpath.analysis.options import AnalysisOptions
from narrowpath.analysis.synchronisation import kernels_per_segment
from narrowpath.catalog import load_scenario
from narrowpath.cli.main import main
from narrowpath.schedule.step import BREAKDOWN_KEYS, predict

QUIET = AnalysisOptions(what_ifs=False, simulate=False)


@pytest.fixture(scope="module")
def deepseek():
    return predict(load_scenario("deepseek-v3-h800-2048"))


def test_the_nvl72_what_if_lays_a_job_larger_than_a_rack_on_64_gpu_segments(deepseek):
    """The what-if built a 72-GPU domain with no segment, so DeepSeek-V3's 64-rank expert groups straddled racks and
    the 'NVL72' step came out 7 % slower (20.8 s against 19.4 s). Built as the catalog's gb200-nvl72 (64 of 72
    GPUs per rack for a multi-rack job), the step is faster (18.2 s)."""
    nvl = remedies.nvl72_system(deepseek.scenario)
    assert nvl.system.scale_up_domain == 72 and nvl.system.segment_gpus == 64
    assert load_scenario("deepseek-v3-h800-2048").system.segment_gpus == 0
    faster = predict(nvl, deepseek.calibration).step_time_s
    straddled = predict(dataclasses.replace(nvl, system=dataclasses.replace(nvl.system, segment_gpus=0)),
                        deepseek.calibration).step_time_s
    assert faster < 0.97 * deepseek.step_time_s < deepseek.step_time_s < straddled


def test_every_transfer_axis_lands_in_a_breakdown_key_compare_and_the_remedies_know(deepseek):
    """DeepSeek-V3's hierarchical exchange books its time on ep_inter / ep_intra, which the step puts in
    exposed_ep_comm; compare's buckets listed only `ep` (its sentence read 'EP all-to-alls appear in B: +5.11 s'
    where A had 0.97 s already) and the remedies' targets named a key that does not exist
    (exposed_ep_inter_comm)."""
    axes = {t.axis for t in deepseek.transfers}
    assert {"ep_inter", "ep_intra"} <= axes
    for axis in axes:
        key = remedies.exposed_key(axis)
        assert key in BREAKDOWN_KEYS and axis in BUCKET_AXES[key], axis
    a = analyze_prediction(deepseek, QUIET)
    b = analyze_prediction(predict(dataclasses.replace(
        deepseek.scenario, system=dataclasses.replace(deepseek.scenario.system, segment_gpus=0, tiers=tuple(
            dataclasses.replace(t, domain_size=72) if t.name == "scale_up" else t
            for t in deepseek.scenario.system.tiers))), deepseek.calibration), QUIET)
    ep = [s for s in compare(a, b).sentences if s.startswith("EP ")]
    d = b.prediction.breakdown_s["exposed_ep_comm"] - a.prediction.breakdown_s["exposed_ep_comm"]
    assert a.prediction.breakdown_s["exposed_ep_comm"] > 0.5 and d > 1.0
    a2a = [x for x in ep if "all-to-alls" in x]  # beside it the token counts' all-gather (ep.token_counts)
    assert len(a2a) == 1 and "replaced by" in a2a[0], ep
    import re
    said = sum(float(m) for x in ep for m in re.findall(r"([+-][0-9.e-]+) s exposed", x))
    assert said == pytest.approx(d, rel=2e-3), ep


def test_the_best_remedy_for_the_narrowest_path_shrinks_that_path():
    """Llama 3 8B on 8 H100: the narrowest path is the memory-bound kernels (0.668 s); FP8 matrix multiplies make
    the step 2.82 s faster but lengthen that path to 1.24 s (casts), and were named its best remedy. Now the remedy
    named shrinks the path (each what-if carries its changed step's paths) and FP8 is said to lengthen it."""
    a = analyze(load_scenario("llama3-8b-h100-8"), AnalysisOptions(simulate=False))
    v = a.verdict
    assert v.narrowest == "hbm_bound_compute"
    now = components(a.context)["hbm_bound_compute"]
    fp8 = next(w for w in v.what_ifs if w.change == "fp8")
    assert fp8.status == "faster" and fp8.components_s["hbm_bound_compute"] > 1.5 * now
    again = components(build_context(predict(fp8.scenario, a.prediction.calibration)))
    assert fp8.components_s == pytest.approx(again, rel=1e-12)
    best = v.remedy.split("Best remedy tried for it on this hardware: ")[1]
    assert not best.startswith("FP8")
    named = next(w for w in v.what_ifs if best.startswith(w.description))
    assert named.components_s["hbm_bound_compute"] < now
    assert (f"FP8 matrix multiplies: step {fp8.gain_s:.3g} s faster, but it lengthens memory-bound kernels at the "
            f"HBM roof {now:.3g} -> {fp8.components_s['hbm_bound_compute']:.3g} s") in v.remedy


def test_the_simulated_jitter_wait_agrees_with_the_closed_form_when_every_collective_hides():
    """Llama 3 8B on 8 H100 under ZeRO-3: every collective hides, so the closed form has one sync point and sized
    the simulator's per-kernel cv on the whole step's kernels (cv 1.96: 'wait 999.7 ms' against the closed form's
    275.6 ms, and goodput 90.3 % from it). The simulator's groups meet at every hidden gather: its per-kernel cv
    is now sized on its own segments, and the two waits agree within a fifth."""
    pred = predict(load_scenario("llama3-8b-h100-8"))
    a = analyze_prediction(pred, AnalysisOptions(what_ifs=False))
    s = a.synchronisation
    assert s.sync_points_per_step <= 2
    k = kernels_per_segment(pred)
    assert 10 < k < 2_000
    assert s.simulated.jitter_spec.endswith(f":{s.jitter_cv * k ** 0.5:.6g}")
    assert s.simulated.jitter_wait_s == pytest.approx(s.jitter_wait_s, rel=0.2)


def test_a_single_gpu_waits_for_nobody_in_the_simulated_budget_too():
    """One GPU: no sync point and a closed-form wait of 0, yet the simulator's step-to-step spread was reported as
    'wait for the slowest' (14.6 ms, p99 388 ms) and counted against goodput."""
    from tests.analysis.conftest import ONE_GPU, scenario_from_flags
    a = analyze_prediction(predict(scenario_from_flags(ONE_GPU)), AnalysisOptions(what_ifs=False))
    s = a.synchronisation
    assert s.sync_points_per_step == 0 and s.jitter_wait_s == 0
    assert s.simulated.steps and s.simulated.jitter_wait_s == 0 and s.simulated.jitter_wait_p99_s == 0
    assert s.goodput == pytest.approx(s.failures.goodput, rel=1e-12)


def test_compare_names_the_what_ifs_it_can_take(capsys):
    """`compare --what-if persistent_rnn` was refused with a list of A's what-ifs that offered persistent_rnn."""
    assert main(["compare", "gnmt-lstm-a100-8", "--what-if", "persistent_rnn"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "without a changed scenario" in err
    offered = err.split("with a changed scenario: ")[1].split(", ")
    assert "persistent_rnn" not in offered and "dp_overlap" in offered
    assert main(["compare", "gnmt-lstm-a100-8", "--what-if", "nope"]) == 2
    assert "'nope': it is not one of A's what-ifs" in capsys.readouterr().err
