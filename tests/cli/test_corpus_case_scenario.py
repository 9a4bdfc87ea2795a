"""One case of a validation corpus as the scenario of predict / analyze / compare (`FILE#CASE_ID`): priced exactly as
`narrowpath validate` prices it (the same knobs chosen, the same step time), so a validated run can be taken apart;
a missing case, a case validate refuses, or a flag the case cannot take is one line and exit 2."""
from __future__ import annotations

import json

import pytest
import yaml

from narrowpath.cli.main import main
from tests.cli.one_line import one_line_error

CASE = {"id": "run-1", "source": "test", "kind": "training", "measured": {"step_time_s": 2.0},
        "model": {"layers": 32, "hidden": 4096, "heads": 32, "kv_heads": 8, "ffn": 14336, "ffn_act": "swiglu",
                  "vocab": 128256, "seq_len": 8192},
        "hardware": {"gpu": "H100-SXM5-80GB", "num_gpus": 16, "gpus_per_node": 8, "nic_gbps_per_gpu": 400},
        "plan": {"tp": 2, "pp": 2, "dp": 4, "cp": 1, "ep": 1, "vpp": 1, "mbs": 1, "gbs": 64, "zero_stage": 1,
                 "recompute": None, "sequence_parallel": True, "precision": "bf16",
                 "framework": "Megatron-Bridge / NeMo 26.04 container"}}


@pytest.fixture
def corpus(tmp_path):
    bad = {**CASE, "id": "run-bad", "plan": {**CASE["plan"], "dp": 3}}  # 64 sequences over dp 3
    f = tmp_path / "mine.yaml"
    f.write_text(yaml.safe_dump({"schema": "validation-corpus/1", "cases": [CASE, bad]}))
    return f


def test_predict_a_case_as_validate_prices_it(corpus, capsys):
    """The case's null recompute is chosen (the note in the JSON), and the step time is validate's to the bit."""
    assert main(["validate", "--corpus", str(corpus), "--json"]) == 1  # run-bad cannot be priced
    validated = {c["id"]: c for c in json.loads(capsys.readouterr().out)["cases"]}
    assert main(["predict", f"{corpus}#run-1", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["step_time_s"] == validated["run-1"]["predicted_step_time_s"]
    assert "fastest that fits" in out["chosen"]["recompute"]  # the choice travels with the scenario


def test_a_profile_chooses_as_validate_profile_does(corpus, capsys):
    """Under another calibration profile the knobs are chosen under that profile, as `validate --profile` does."""
    main(["validate", "--corpus", str(corpus), "--profile", "A100-SXM4-80GB", "--json"])
    validated = {c["id"]: c for c in json.loads(capsys.readouterr().out)["cases"]}
    assert main(["predict", f"{corpus}#run-1", "--profile", "A100-SXM4-80GB", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["step_time_s"] == validated["run-1"]["predicted_step_time_s"]


def test_the_profile_reaches_the_chooser(corpus, monkeypatch, capsys):
    """`predict FILE#ID --profile X` resolves the case's open knobs under X (the chooser prices every candidate
    under it), not the device's own."""
    import narrowpath.schedule.step as step
    from narrowpath.catalog.resolve import calibration_from
    seen, real = [], step.predict

    def spy(scn, calibration=None):
        seen.append(calibration)
        return real(scn, calibration)
    monkeypatch.setattr(step, "predict", spy)
    assert main(["predict", f"{corpus}#run-1", "--profile", "A100-SXM4-80GB", "--json"]) == 0
    assert seen and seen[0] == calibration_from("A100-SXM4-80GB")


def test_flags_apply_before_the_choice(tmp_path, capsys):
    """An unnamed engine's case on 2 stages (vpp open): `--pp 4` re-chooses vpp among the divisors of its 8-layer
    stages and says so; a stated `--vpp 2` is not chosen at all."""
    plan = {k: v for k, v in CASE["plan"].items() if k != "vpp"}
    case = {**CASE, "id": "meta", "plan": {**plan, "framework": "Meta internal"}}
    f = tmp_path / "meta.yaml"
    f.write_text(yaml.safe_dump({"schema": "validation-corpus/1", "cases": [case]}))
    assert main(["predict", f"{f}#meta", "--pp", "4", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["plan"]["pp"] == 4 and out["plan"]["vpp"] in (1, 2, 4, 8) and out["fits"]
    assert "no known stack" in out["chosen"]["vpp"] and "recompute" in out["chosen"]
    assert main(["predict", f"{f}#meta", "--pp", "4", "--vpp", "2", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["plan"]["vpp"] == 2 and "vpp" not in out["chosen"]


def test_analyze_and_flags_on_a_case(corpus, capsys):
    """analyze takes the case; a flag changes the chosen plan (tp 4 re-derives dp 2 on the case's 16 GPUs)."""
    assert main(["validate", "--corpus", str(corpus)]) == 1
    assert f"take one apart: narrowpath analyze '{corpus}#run-1'" in capsys.readouterr().out
    assert main(["analyze", f"{corpus}#run-1"]) == 0
    assert "run-1" in capsys.readouterr().out
    assert main(["predict", f"{corpus}#run-1", "--tp", "4", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["plan"]["tp"], out["plan"]["dp"]) == (4, 2)


def test_bad_case_references_are_one_line(corpus, capsys):
    one_line_error(capsys, ["predict", f"{corpus}#nope"], "no case 'nope'", "run-1")
    one_line_error(capsys, ["predict", f"{corpus}#run-bad"], "run-bad", "plan.gbs")
    one_line_error(capsys, ["predict", f"{corpus.parent}/missing.yaml#run-1"], "no such file")
    one_line_error(capsys, ["predict", f"{corpus}#run-1", "--seq-len", "4096"], "--seq-len")


def _inference_case(cid: str) -> dict:
    from narrowpath.validate.corpus import shipped_corpus_path
    data = yaml.safe_load(shipped_corpus_path("inference-public.yaml").read_text())
    return next(c for c in data["cases"] if c["id"] == cid)


def test_serve_an_inference_case_as_validate_serves_it(tmp_path, capsys):
    """TensorRT-LLM 0.7a's Llama-2 70B static batch of 192 on one H200: `serve FILE#ID` gives validate's predicted
    output tokens/s to the bit; a case whose lengths follow an unpublished data set, or a missing id: one line."""
    case = _inference_case("trtllm-blog-h200-llama2-70b-tp1-bs192-128-2048")
    dataset = {**case, "id": "sharegpt", "workload": {**case["workload"], "input_tokens": None}}
    f = tmp_path / "serving.yaml"
    f.write_text(yaml.safe_dump({"schema": "inference-corpus/1", "cases": [case, dataset]}))
    main(["validate", "--corpus", str(f), "--json"])
    validated = {c["id"]: c for c in json.loads(capsys.readouterr().out)["cases"]}
    assert main(["serve", f"{f}#{case['id']}", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["output_tokens_per_s"] == validated[case["id"]]["figures"]["output_tokens_per_s"]["predicted"]
    assert main(["search", "--serve", f"{f}#{case['id']}", "--gpus", "1", "--slo-ttft", "1000", "--slo-tpot", "1",
                 "--json"]) == 0  # the serving search starts from the case too
    assert json.loads(capsys.readouterr().out)["ranked"]
    one_line_error(capsys, ["serve", f"{f}#sharegpt"], "sharegpt", "workload.input_tokens")
    one_line_error(capsys, ["serve", f"{f}#nope"], "no case 'nope'")


def test_references_read_as_written(tmp_path, capsys):
    """An id holding '#', an upper-case suffix, a plain scenario file under a folder whose name holds '#', and a
    corpus of the other kind (each command names the one that takes it)."""
    from narrowpath.validate.corpus import shipped_corpus_path
    f = tmp_path / "RUNS.YAML"
    f.write_text(yaml.safe_dump({"schema": "validation-corpus/1", "cases": [{**CASE, "id": "a#b"}]}))
    assert main(["validate", "--corpus", str(f)]) == 0
    hint = [ln for ln in capsys.readouterr().out.splitlines() if "take one apart" in ln][0]
    assert main(["predict", hint.split("narrowpath analyze ", 1)[1].strip("'"), "--json"]) == 0
    capsys.readouterr()
    folder = tmp_path / "x.yaml#sub"
    folder.mkdir()
    (folder / "scn.yaml").write_text(yaml.safe_dump({"system": "dgx-h100", "model": "llama3-8b",
                                                     "plan": {"dp": 8, "gbs": 64}}))
    assert main(["predict", str(folder / "scn.yaml"), "--json"]) == 0
    capsys.readouterr()
    inference = shipped_corpus_path("inference-public.yaml")
    one_line_error(capsys, ["predict", f"{inference}#x"], "is an inference corpus", "narrowpath serve")
    one_line_error(capsys, ["serve", f"{f}#a#b"], "is a training corpus", "narrowpath analyze")


def test_an_inference_case_without_an_id_is_served_as_validate_names_it(tmp_path, capsys):
    """validate names an id-less case `case[0]`; `serve FILE#case[0]` finds it."""
    case = {k: v for k, v in _inference_case("trtllm-blog-h200-llama2-70b-tp1-bs192-128-2048").items() if k != "id"}
    f = tmp_path / "noid.yaml"
    f.write_text(yaml.safe_dump({"schema": "inference-corpus/1", "cases": [case]}))
    assert main(["serve", f"{f}#case[0]", "--json"]) == 0


def test_serve_keeps_what_the_case_settled(tmp_path, capsys):
    """`serve FILE#ID` says what validate settled for the case: a static batch whose output length is not published
    runs its input length (said, unless --output-len gives one), and a model the catalog knows says so (unless
    --model replaces it)."""
    gptj = _inference_case("trtllm-blog-gptj-h100-fp8-bs1")
    assert gptj["workload"]["output_tokens"] is None and gptj["workload"]["scenario"] == "fixed-batch"
    llama = _inference_case("trtllm-perf-llama33-70b-rtx6000-tp1pp8-fp4-1000-1000")
    f = tmp_path / "serving.yaml"
    f.write_text(yaml.safe_dump({"schema": "inference-corpus/1", "cases": [gptj, llama]}))

    def assumptions(*argv):
        assert main(["serve", *argv, "--json"]) == 0
        return json.loads(capsys.readouterr().out)["assumptions"]

    said = [a for a in assumptions(f"{f}#{gptj['id']}") if a.startswith("workload.output_tokens: ")]
    assert len(said) == 1 and said[0].startswith(f"workload.output_tokens: {gptj['workload']['input_tokens']} — not "
                                                 "published")
    assert not [a for a in assumptions(f"{f}#{gptj['id']}", "--output-len", "50")
                if a.startswith("workload.output_tokens")]
    assert [a for a in assumptions(f"{f}#{llama['id']}") if a.startswith("model: ") and "llama3-70b" in a]
    assert not [a for a in assumptions(f"{f}#{llama['id']}", "--model", "llama3-8b") if a.startswith("model: ")]


def test_what_was_said_of_the_cases_model_goes_with_it(corpus, capsys):
    """The case's Llama-3-8B shape is the catalog's llama3-8b (its RMSNorm taken, and said); `--model` replaces the
    model and with it that note."""
    assert main(["predict", f"{corpus}#run-1", "--json"]) == 0
    chosen = json.loads(capsys.readouterr().out)["chosen"]
    assert "llama3-8b" in chosen["model"] and "rmsnorm" in chosen["model"]
    assert main(["predict", f"{corpus}#run-1", "--model", "llama3-8b", "--json"]) == 0
    assert "model" not in json.loads(capsys.readouterr().out)["chosen"]


@pytest.mark.parametrize("flags", [["--rate", "2", "--input-len", "1000"], ["--offline"], ["--batch", "8"],
                                   ["--concurrency", "4"], ["--output-len", "128"], ["--num-requests", "3"]])
def test_a_load_flag_retires_the_cases_load_note(tmp_path, capsys, flags):
    """Any flag that restates the workload makes the case's 'static batch at its input length' note untrue."""
    gptj = _inference_case("trtllm-blog-gptj-h100-fp8-bs1")
    f = tmp_path / "serving.yaml"
    f.write_text(yaml.safe_dump({"schema": "inference-corpus/1", "cases": [gptj]}))
    assert main(["serve", f"{f}#{gptj['id']}", *flags, "--json"]) == 0
    assert not [a for a in json.loads(capsys.readouterr().out)["assumptions"] if a.startswith("workload.")]


@pytest.mark.parametrize("flags", [["--replicas", "1"], ["--tp", "4"], ["--gpus", "2"]])
def test_a_layout_flag_retires_what_the_gpu_count_left(tmp_path, capsys, flags):
    """A case with dp unpublished on 4 GPUs at tp 2 settles dp 2 ("what the GPU count leaves"); a flag that moves the
    layout (replicas, tp, the GPU count) makes that note stale, so it goes."""
    case = _inference_case("trtllm-perf-llama33-70b-h100-tp2-fp8-128-2048")
    case = {**case, "hardware": {**case["hardware"], "num_gpus": 4}, "plan": {**case["plan"], "dp": None}}
    f = tmp_path / "serving.yaml"
    f.write_text(yaml.safe_dump({"schema": "inference-corpus/1", "cases": [case]}))
    dp_notes = lambda out: [a for a in out["assumptions"] if a.startswith("dp: ")]  # noqa: E731
    assert main(["serve", f"{f}#{case['id']}", "--num-requests", "64", "--json"]) == 0
    assert dp_notes(json.loads(capsys.readouterr().out))
    assert main(["serve", f"{f}#{case['id']}", "--num-requests", "64", *flags, "--json"]) == 0
    assert not dp_notes(json.loads(capsys.readouterr().out))
