"""`narrowpath serve` and `search --serve`: the JSON contract, outputs, and one-line refusals (exit 2)."""
from __future__ import annotations

import json

import pytest
import yaml

from narrowpath.cli.main import main

BASE = ["serve", "--model", "llama3-8b", "--system", "dgx-h100", "--input-len", "256", "--output-len", "32",
        "--num-requests", "40"]


def test_serve_json_contract(capsys):
    assert main(BASE + ["--rate", "4", "--json", "--no-whatif"]) == 0
    out = json.loads(capsys.readouterr().out)
    for key in ("output_tokens_per_s", "total_tokens_per_s"):
        assert out[key] > 0
    for key in ("ttft_s", "tpot_s", "e2e_latency_s"):
        assert set(out[key]) == {"mean", "p50", "p90", "p99"}
        assert 0 < out[key]["p50"] <= out[key]["p99"]
    assert out["total_tokens_per_s"] > out["output_tokens_per_s"]
    assert 0 <= out["kv_cache"]["utilisation"] <= 1 and 0 < out["mfu"] < 1 and 0 < out["mbu"] < 1
    assert {r["level"] for r in out["accounts"]["levels"]} >= {"hbm", "sram", "l2", "scale_up"}


def test_serve_console_with_whatifs_plots_and_timeline(tmp_path, capsys):
    tl = tmp_path / "t.json"
    assert main(BASE + ["--tp", "2", "--gpus", "4", "--offline", "--plots", str(tmp_path / "p"),
                        "--timeline", str(tl)]) == 0
    text = capsys.readouterr().out
    for phrase in ("throughput", "TTFT", "KV cache use", "MFU", "collectives per generated token",
                   "distance budget", "narrowest path", "more TP", "FP8 KV cache"):
        assert phrase in text
    assert sorted(p.name for p in (tmp_path / "p").iterdir()) == ["serve_lane.png", "serve_latency.png"]
    events = json.loads(tl.read_text())["traceEvents"]
    assert any(e.get("ph") == "X" for e in events)


def test_serve_a_file_and_a_trace(tmp_path, capsys):
    trace = tmp_path / "req.csv"
    trace.write_text("arrival_s,input_tokens,output_tokens\n0,100,10\n0.5,300,20\n1.0,50,5\n")
    f = tmp_path / "s.yaml"
    f.write_text(yaml.safe_dump({"system": "dgx-h100", "model": "llama3-8b", "num_gpus": 2,
                                 "plan": {"tp": 1, "dp": 2, "weights_precision": "fp8", "kv_precision": None,
                                          "framework": "vLLM 0.8"},
                                 "workload": {"scenario": "server", "requests_file": "req.csv"}}))
    assert main(["serve", str(f), "--json", "--no-whatif"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["scenario"]["load"]["num_requests"] == 3 and out["scenario"]["plan"]["replicas"] == 2
    assert out["scenario"]["plan"]["kv_precision"] == "bf16"  # vLLM keeps the model's 16-bit KV


@pytest.mark.parametrize("plan,chosen", [
    ({"tp": None}, {"tp"}),
    ({"tp": None, "pp": None}, {"tp", "pp"}),
    ({"tp": 2, "pp": None}, {"pp"}),
])
def test_a_file_with_an_open_layout_serves_on_its_stated_gpus(tmp_path, capsys, plan, chosen):
    """A null tp or pp (not published) on a stated GPU count: the open knob takes the GPUs the published ones leave
    as its placeholder, so the plan is consistent and the layout choice varies it over the same 4 GPUs (before, the
    placeholder 1 refused the file: "replicas·tp·dp·pp = 1 … does not equal num_gpus 4")."""
    f = tmp_path / "s.yaml"
    f.write_text(yaml.safe_dump({"system": "dgx-h100", "model": "llama3-8b", "num_gpus": 4, "plan": plan,
                                 "workload": {"scenario": "offline", "input_tokens": 64, "output_tokens": 8,
                                              "num_requests": 16}}))
    assert main(["serve", str(f), "--json", "--no-whatif"]) == 0
    out = json.loads(capsys.readouterr().out)
    p = out["scenario"]["plan"]
    assert p["tp"] * p["pp"] * p["replicas"] * p.get("dp", 1) == 4
    if "tp" not in chosen:
        assert p["tp"] == 2
    for k in ("tp", "pp"):
        said = [a for a in out["assumptions"] if a.startswith(f"{k}: ") and a.endswith("(not published)")]
        assert len(said) == (k in chosen), out["assumptions"]


@pytest.mark.parametrize("extra,needle", [
    (["--model", "llama3-405b", "--system", "dgx-h100", "--input-len", "10", "--output-len", "5"],
     "does not fit for serving"),
    (["--model", "llama3-8b", "--system", "dgx-a100", "--weights", "fp8", "--input-len", "10",
      "--output-len", "5"], "plan.weight_precision"),
    (["--model", "llama3-8b", "--system", "dgx-h100", "--requests", "missing.csv"], "workload.requests_file"),
    (["--model", "llama3-8b", "--system", "dgx-h100"], "--input-len/--output-len"),
    (["--model", "llama3-8b", "--system", "dgx-h100", "--tp", "3", "--input-len", "9", "--output-len", "9"],
     "plan.tp"),
])
def test_serve_refusals_are_one_line(capsys, extra, needle):
    assert main(["serve"] + extra) == 2
    err = capsys.readouterr().err
    assert needle in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_bad_request_file_names_row_and_field(tmp_path, capsys):
    bad = tmp_path / "bad.csv"
    bad.write_text("arrival_s,input_tokens,output_tokens\n0,100,10\n0.1,abc,4\n")
    assert main(["serve", "--model", "llama3-8b", "--system", "dgx-h100", "--requests", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "request 2" in err and "input_tokens" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("row, field, shown", [
    ('{"arrival_s": 0, "input_tokens": 10, "output_tokens": 5.5}', "output_tokens", "5.5"),
    ('{"arrival_s": 0, "input_tokens": 0.5, "output_tokens": 5}', "input_tokens", "0.5"),
    ('{"arrival_s": 0, "input_tokens": 12, "output_tokens": 1e400}', "output_tokens", "inf")])
def test_fractional_request_lengths_are_refused_not_truncated(tmp_path, capsys, row, field, shown):
    """A request of 5.5 output tokens was served as 5 (int(float(x))) and one of 0.5 prompt tokens refused as
    'got 0' (fifty-sixth session's review): the row, the field and the value as written, exit 2."""
    bad = tmp_path / "bad.json"
    bad.write_text(f"[{row}]")
    assert main(["serve", "--model", "llama3-8b", "--system", "dgx-h100", "--requests", str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "request 1" in err and field in err and f"got {shown}" in err
    bad.write_text('[{"arrival_s": 0, "input_tokens": 12.0, "output_tokens": "4"}]')  # whole numbers, any spelling
    assert main(["serve", "--model", "llama3-8b", "--system", "dgx-h100", "--requests", str(bad), "--no-whatif"]) == 0


SEARCH = ["search", "--serve", "--model", "llama3-8b", "--system", "dgx-h100", "--gpus", "4", "--input-len",
          "512", "--output-len", "64", "--jobs", "1"]


def test_search_serve_ranks_by_throughput_per_gpu_under_slos(capsys):
    assert main(SEARCH + ["--slo-ttft", "5", "--slo-tpot", "0.05", "--json", "--top", "50"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["num_plans"] >= 40 and out["meets_slo"] >= 1
    tput = [r["output_tokens_per_s_per_gpu"] for r in out["ranked"]]
    assert tput == sorted(tput, reverse=True)
    assert all(r["ttft_s"] <= 5 and r["tpot_s"] <= 0.05 for r in out["ranked"])


def test_search_serve_impossible_slos_are_one_line(capsys):
    assert main(SEARCH + ["--slo-ttft", "1e-6", "--slo-tpot", "1e-6"]) == 2
    err = capsys.readouterr().err
    assert "none of the" in err and "--slo-ttft/--slo-tpot" in err and len(err.strip().splitlines()) == 1
    assert main(SEARCH + ["--slo-ttft", "1"]) == 2
    assert "--slo-ttft/--slo-tpot" in capsys.readouterr().err


def test_predict_points_inference_to_serve(tmp_path, capsys):
    f = tmp_path / "inf.yaml"
    f.write_text(yaml.safe_dump({"system": "dgx-h100", "model": "llama3-8b", "num_gpus": 8, "mode": "inference",
                                 "plan": {"tp": 1, "pp": 1, "dp": 8, "mbs": 1, "gbs": 8}}))
    assert main(["predict", str(f)]) == 2
    assert "narrowpath serve" in capsys.readouterr().err


def test_gpus_derive_replicas_before_disaggregation_is_checked(capsys):
    """--gpus 16 with tp 2 · dp 4 gives 2 instances, so one of them may prefill for the other."""
    assert main(["serve", "--model", "mixtral-8x7b", "--system", "dgx-h100", "--tp", "2", "--dp", "4", "--ep", "8",
                 "--gpus", "16", "--prefill-replicas", "1", "--rate", "10", "--input-len", "500", "--output-len", "20",
                 "--num-requests", "40", "--no-whatif", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["scenario"]["plan"]["replicas"] == 2 and out["scenario"]["plan"]["prefill_replicas"] == 1
    assert main(BASE[:-2] + ["--num-requests", "0"]) == 2
    assert "--num-requests" in capsys.readouterr().err


def test_a_host_bound_deployment_says_so_and_cannot_beat_its_executor(capsys):
    """Llama-3 8B FP8 on one B200 under trtllm-bench 1.0, 128/1024: ~1,400 decodes an iteration need ~41 ms of the
    PyTorch executor's host work (29 us each) against ~22 ms on the GPU, so the host sets the pace. One executor can
    then produce at most 1 / 29 us = 34,483 output tokens/s whatever the GPU, and the accounts name the host as
    the largest share of an iteration."""
    args = ["serve", "--model", "llama3-8b", "--system", "dgx-b200", "--weights", "fp8", "--kv", "fp8", "--offline",
            "--input-len", "128", "--output-len", "1024", "--num-requests", "3000", "--framework",
            "TensorRT-LLM 1.0 (PyTorch backend)", "--json", "--no-whatif"]
    assert main(args) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["output_tokens_per_s"] <= 1 / 29e-6
    split = out["accounts"]["time_split"]
    assert max(split, key=split.get) == "host: executor per-request work"
    assert sum(split.values()) == pytest.approx(1.0)


def test_a_pipelined_pytorch_executor_shows_its_host_work_between_the_stages(capsys, monkeypatch):
    """Llama-3 8B FP8 on two B200 as pp 2 under trtllm-bench 1.0: its pipeline loop waits on each stage before a
    micro-batch's host work (stack pp_host_serial), so the accounts carry the whole per-request host work as a share
    of the iteration even where the GPU would outlast it, and the run is slower than the same stack with the host
    work overlapped (the flag taken off, everything else equal)."""
    args = ["serve", "--model", "llama3-8b", "--system", "dgx-b200", "--pp", "2", "--gpus", "2", "--weights", "fp8",
            "--kv", "fp8", "--offline", "--input-len", "128", "--output-len", "256", "--num-requests", "400",
            "--max-batch", "64", "--max-num-tokens", "4096", "--framework", "TensorRT-LLM 1.0 (PyTorch backend)",
            "--json", "--no-whatif"]
    assert main(args) == 0
    serial = json.loads(capsys.readouterr().out)
    assert serial["accounts"]["time_split"].get("host: executor per-request work", 0.0) > 0.0
    import narrowpath.schedule.serving_cost as sc
    real = sc.serving_stack
    monkeypatch.setattr(sc, "serving_stack", lambda fw: {k: v for k, v in real(fw).items() if k != "pp_host_serial"})
    assert main(args) == 0
    overlapped = json.loads(capsys.readouterr().out)
    assert serial["output_tokens_per_s"] < overlapped["output_tokens_per_s"]


def test_serve_reads_a_huggingface_config_without_a_training_length(tmp_path, capsys):
    """A HuggingFace config states the position limit, not a training sequence length, and serving needs none:
    `serve --model config.json` once refused it with "give --seq-len N", a flag serve does not have. The config
    is the catalog's Qwen3-30B-A3B, so both serve it alike."""
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({
        "model_type": "qwen3_moe", "num_hidden_layers": 48, "hidden_size": 2048, "num_attention_heads": 32,
        "num_key_value_heads": 4, "head_dim": 128, "intermediate_size": 6144, "moe_intermediate_size": 768,
        "num_experts": 128, "num_experts_per_tok": 8, "vocab_size": 151936, "rms_norm_eps": 1e-6,
        "tie_word_embeddings": False, "max_position_embeddings": 40960}))
    run = ["--system", "dgx-h100", "--gpus", "8", "--tp", "8", "--offline", "--input-len", "512",
           "--output-len", "64", "--num-requests", "64", "--json", "--no-whatif"]
    assert main(["serve", "--model", str(cfg)] + run) == 0
    from_config = json.loads(capsys.readouterr().out)
    assert main(["serve", "--model", "qwen3-30b-a3b"] + run) == 0
    from_catalog = json.loads(capsys.readouterr().out)
    assert from_config["output_tokens_per_s"] == pytest.approx(from_catalog["output_tokens_per_s"], rel=1e-12)
