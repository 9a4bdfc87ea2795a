"""The inference validator reads every case of an inference-corpus/1 file and keeps the JSON contract."""
from __future__ import annotations

import json

import pytest
import yaml

from narrowpath.catalog.serving import serving_scenario_from_dict
from narrowpath.cli.main import main
from narrowpath.schedule.serving_defaults import resolve_formats, resolve_limits
from narrowpath.validate.corpus import shipped_corpus_path
from narrowpath.validate.inference import is_inference_corpus, load_inference_corpus, run_case

CORPUS = shipped_corpus_path("inference-public.yaml")


def _data(raw):
    return {k: v for k, v in raw.items() if k not in ("id", "source", "kind", "measured", "assumed")}


def test_every_shipped_case_is_read_and_resolved():
    """All 40 cases build a serving scenario (nulls left open, every GPU in the catalog) and get their limits."""
    cases = load_inference_corpus(CORPUS)
    assert len(cases) == 40 and is_inference_corpus(CORPUS)
    for raw in cases:
        data = _data(raw)
        if data["workload"].get("output_tokens") is None:
            data["workload"] = {**data["workload"], "output_tokens": data["workload"]["input_tokens"]}
        scn, open_knobs = serving_scenario_from_dict(data, name=raw["id"], allow_null=True)
        assert scn.num_gpus == raw["hardware"]["num_gpus"], raw["id"]
        if "ep" not in open_knobs:
            r, lim = resolve_limits(resolve_formats(scn, open_knobs))
            assert lim.max_batch >= 1 and lim.memory.kv_tokens > 0, raw["id"]


def test_attention_dp_cases_map_tp_size_to_attention_dp():
    """`tp 8, dp 8` on 8 GPUs of an MoE model is TensorRT-LLM's tp_size 8 with attention DP: dp 8 ranks of 1 GPU."""
    raw = next(c for c in load_inference_corpus(CORPUS) if c["id"] == "trtllm-perf-qwen3-235b-h200-tp8-fp8-1000-1000")
    scn, open_knobs = serving_scenario_from_dict(_data(raw), allow_null=True)
    assert (scn.plan.tp, scn.plan.dp, scn.num_gpus) == (1, 8, 8) and "ep" in open_knobs


def _small_corpus(tmp_path, cases):
    path = tmp_path / "inf.yaml"
    path.write_text(yaml.safe_dump({"schema": "inference-corpus/1", "cases": cases}))
    return path


def test_cli_json_contract(tmp_path, capsys):
    raw = [c for c in load_inference_corpus(CORPUS) if c["id"] in ("trtllm-blog-gptj-h100-fp8-bs64",
                                                                    "nemo-llama2-7b-h100-tp1-bs1-128-20")]
    path = _small_corpus(tmp_path, raw)
    assert main(["validate", "--corpus", str(path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert len(out["cases"]) == 2
    errs = []
    for c, r in zip(out["cases"], raw):
        measured = {k for k in r["measured"] if k != "percentile"}
        assert set(c["figures"]) == measured
        for f in c["figures"].values():
            assert f["error"] == pytest.approx((f["predicted"] - f["measured"]) / f["measured"])
            errs.append(f["error"])
        assert abs(c["error"]) == max(abs(f["error"]) for f in c["figures"].values())
    assert out["mean_abs_error"] == pytest.approx(sum(abs(e) for e in errs) / len(errs))
    assert out["max_abs_error"] == pytest.approx(max(abs(e) for e in errs))
    assert set(out["groups"]) >= {"regime", "generation", "precision", "family"}
    assert main(["validate", "--corpus", str(path)]) == 0
    assert "by regime" in capsys.readouterr().out


def test_unpublished_output_length_is_predicted_as_a_generation_rate():
    raw = next(c for c in load_inference_corpus(CORPUS) if c["id"] == "trtllm-blog-gptj-a100-fp16-bs1")
    case = run_case(raw, 0)
    assert case.failure is None and case.notes[0].startswith("workload.output_tokens: ")
    assert "not published" in case.notes[0]
    res = case.run.result
    assert case.figures["output_tokens_per_s"].predicted == pytest.approx(1 / res.tpot_s.mean())


@pytest.mark.parametrize("doc,msg", [
    ({"cases": []}, "is not .inference-corpus/1"),
    ({"schema": "inference-corpus/1"}, "not an inference-corpus/1 file"),
    ({"schema": "inference-corpus/1", "cases": [{"id": "a"}, {"id": "a"}]}, "duplicate case id"),
])
def test_bad_corpus_is_one_line(tmp_path, capsys, doc, msg):
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(doc))
    from narrowpath.errors import NarrowpathError
    with pytest.raises(NarrowpathError, match=msg):
        load_inference_corpus(path)


def test_a_bad_case_fails_alone():
    case = run_case({"id": "x", "measured": {"output_tokens_per_s": 5}, "model": "llama3-8b",
                     "hardware": {"gpu": "NoSuchGPU", "num_gpus": 1}, "plan": {"tp": 1},
                     "workload": {"scenario": "offline", "input_tokens": 10, "output_tokens": 10}}, 0)
    assert case.failure and "NoSuchGPU" in case.failure and case.error is None



@pytest.mark.parametrize("field", ["input_tokens", "output_tokens"])
def test_lengths_from_a_data_set_are_refused_in_one_line(field):
    """README: `input_tokens`/`output_tokens` are null when they follow a data set's distribution; the case does not
    give that distribution, so the case is refused with its reason (the others are priced)."""
    w = {"scenario": "offline", "input_tokens": 128, "output_tokens": 128, "num_requests": 100, field: None}
    case = run_case({"id": "x", "measured": {"output_tokens_per_s": 5}, "model": "llama3-8b",
                     "hardware": {"gpu": "H100-SXM5-80GB", "num_gpus": 1}, "plan": {"tp": 1}, "workload": w}, 0)
    assert case.error is None and case.failure.startswith(f"workload.{field}: not published")
    assert "\n" not in case.failure


def _llama70b_h100(**changes):
    raw = next(c for c in load_inference_corpus(CORPUS) if c["id"] == "trtllm-perf-llama33-70b-h100-tp2-fp8-128-2048")
    raw = json.loads(json.dumps(raw))
    for where, knob, value in changes.get("set", ()):
        raw[where][knob] = value
    return raw


def test_nulls_the_case_settles_are_filled_and_said():
    """A null dp is what the GPU count leaves over tp·pp (2 H100 at tp 2: one instance); a null framework is the
    default serving stack; a null scenario is offline (the README's first): each priced, none a crash."""
    stated = run_case(_llama70b_h100(), 0)
    dp = run_case(_llama70b_h100(set=[("plan", "dp", None)]), 0)
    assert dp.failure is None and dp.figures["output_tokens_per_s"].predicted == \
        stated.figures["output_tokens_per_s"].predicted
    assert any(n.startswith("dp: 1 — what the GPU count leaves") for n in dp.notes), dp.notes
    fw = run_case(_llama70b_h100(set=[("plan", "framework", None)]), 0)
    assert fw.failure is None and any(n.startswith("framework: the default serving stack") for n in fw.notes)
    sc = run_case(_llama70b_h100(set=[("workload", "scenario", None)]), 0)
    assert sc.failure is None and sc.regime == "offline throughput"


def test_null_figures_and_percentile_are_not_published_not_errors():
    """A figure given as null is not published (skipped); a null percentile is the mean; a case whose every
    figure is null is refused naming `measured`."""
    raw = _llama70b_h100(set=[("measured", "ttft_s", None), ("measured", "percentile", None)])
    case = run_case(raw, 0)
    assert case.failure is None and list(case.figures) == ["output_tokens_per_s"]
    assert "percentile: not published — the figures are compared as means" in case.notes
    assert case.figures["output_tokens_per_s"].predicted == run_case(_llama70b_h100(), 0).figures[
        "output_tokens_per_s"].predicted
    none = run_case(_llama70b_h100(set=[("measured", "output_tokens_per_s", None)]), 0)
    assert none.failure.startswith("measured: needs at least one of")


def test_validate_reads_a_collective_corpus_too(capsys):
    """`validate --corpus` on the collective corpus gives what `collective --corpus` gives (nccl-tests busbw)."""
    path = shipped_corpus_path("collectives-public.yaml")
    assert main(["validate", "--corpus", str(path), "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert main(["collective", "--corpus", str(path), "--json"]) == 0
    assert got == json.loads(capsys.readouterr().out)
    assert len(got["cases"]) == 5 and got["max_abs_error"] < 0.05
    from tests.cli.one_line import one_line_error
    one_line_error(capsys, ["validate", "--corpus", str(path), "--profile", "H100-SXM5-80GB"], "--profile")


def test_validate_sets_a_bad_collective_case_aside(tmp_path, capsys):
    """As for the other corpora, `validate` prices every good case of a collective corpus, lists each bad one with
    its reason and exits 1 (`collective --corpus` stops at the first, exit 2)."""
    good = yaml.safe_load(shipped_corpus_path("collectives-public.yaml").read_text())["cases"][0]
    bad = {**good, "id": "pcie", "hardware": {**good["hardware"], "gpu": "V100 PCIe 32GB"}}
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"schema": "collective-corpus/1", "cases": [good, bad]}))
    assert main(["validate", "--corpus", str(path), "--json"]) == 1
    got = json.loads(capsys.readouterr().out)
    assert [c["id"] for c in got["cases"]] == [good["id"]]
    assert got["failed"][0]["id"] == "pcie" and "PCIE board" in got["failed"][0]["failure"]
    assert main(["validate", "--corpus", str(path)]) == 1
    assert "FAILED pcie: corpus.cases[1].hardware.gpu" in capsys.readouterr().out
    assert main(["collective", "--corpus", str(path)]) == 2


def test_a_null_dp_of_an_moe_deployment_is_attention_dp_off():
    """Qwen3-235B at tp 8 on 8 H200 with dp null: the GPU count leaves dp 1 — attention data parallelism off,
    TensorRT-LLM's default — and the note says so (the corpus row states dp 8)."""
    raw = next(c for c in load_inference_corpus(CORPUS) if c["id"] == "trtllm-perf-qwen3-235b-h200-tp8-fp8-1000-1000")
    raw = json.loads(json.dumps(raw))
    raw["plan"]["dp"] = None
    case = run_case(raw, 0)
    assert case.failure is None and case.run.scenario.plan.dp == 1
    assert "dp: 1 — attention data parallelism off, the engines' default (not published)" in case.notes


@pytest.mark.parametrize("value", [0, -5])
def test_a_stated_zero_length_is_out_of_range_not_missing(value):
    from narrowpath.catalog.serving import load_from_dict
    from narrowpath.errors import SpecError
    with pytest.raises(SpecError, match=r"^workload\.input_tokens: must be >= 1 token"):
        load_from_dict({"scenario": "offline", "input_tokens": value, "output_tokens": 8})

SERVING_BOUNDS = {  # (group kind, group): ceiling on the mean |error| of its figures (today's value + ~2 pp)
    ("regime", "latency (<= 8 sequences)"): 0.16, ("regime", "offline throughput"): 0.18,
    ("regime", "static-batch throughput"): 0.14,
    ("generation", "ampere"): 0.115, ("generation", "hopper"): 0.14, ("generation", "blackwell"): 0.25,
    ("family", "dense"): 0.145, ("family", "moe"): 0.22,
}


def test_the_serving_corpus_stays_within_its_bounds_by_regime():
    """A regression guard like tests/validate/test_regimes.py's for training: every figure of the shipped serving
    corpus priced, the mean |error| over all 50 figures and per group under today's value plus a small margin
    (the issue-13 target, 10 % / 25 %, is not met: docs/serving-validation.md, the closing notes)."""
    from narrowpath.validate.inference import run_inference_validation
    rep = run_inference_validation(CORPUS)
    assert not [c.id for c in rep.cases if c.failure] and len(rep.all_errors) == 50
    assert rep.mean_abs_error <= 0.16
    over = {k: round(rep.grouped(k[0])[k[1]]["mean_abs_error"], 4) for k, bound in SERVING_BOUNDS.items()
            if rep.grouped(k[0])[k[1]]["mean_abs_error"] > bound}
    assert not over, over
