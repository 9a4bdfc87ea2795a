"""End-to-end CLI: real subprocesses for exit codes and stderr; in-process main() for speed elsewhere."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from narrowpath.cli.main import main


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "narrowpath", *args], capture_output=True, text=True, timeout=120)


def test_predict_catalog_scenario_table(capsys):
    assert main(["predict", "gpt3-175b-a100-1024"]) == 0
    out = capsys.readouterr().out
    for needle in ("step time", "MFU", "HFU", "STEP BREAKDOWN", "pipeline bubble", "MEMORY PER RANK", "COMMUNICATION"):
        assert needle in out


def test_predict_json_is_consistent(capsys):
    assert main(["predict", "llama3-70b-h100-256", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["num_gpus"] == 256 and data["plan"]["tp"] == 8
    assert sum(data["breakdown_s"].values()) == pytest.approx(data["step_time_s"])
    assert data["memory"]["fits"] is True
    assert 0 < data["mfu"] < 1 and data["tokens_per_s"] > 0


def test_predict_from_flags_derives_dp(capsys):
    assert main(["predict", "--model", "llama3-8b", "--system", "dgx-h100", "--gpus", "16", "--tp", "2",
                 "--gbs", "64", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["plan"]["dp"] == 8 and data["plan"]["gbs"] == 64


def test_predict_from_file_and_hf_config(tmp_path, capsys):
    cfg = {"model_type": "llama", "num_hidden_layers": 16, "hidden_size": 2048, "num_attention_heads": 16,
           "num_key_value_heads": 4, "intermediate_size": 8192, "vocab_size": 32000, "max_position_embeddings": 4096,
           "rms_norm_eps": 1e-5}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    (tmp_path / "s.yaml").write_text("system: dgx-h100\nmodel: {hf_config: config.json, seq_len: 2048}\n"
                                     "num_gpus: 8\nplan: {tp: 2, dp: 4, mbs: 2, gbs: 32, precision: bf16}\n")
    assert main(["predict", str(tmp_path / "s.yaml"), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["plan"]["dp"] == 4 and data["step_time_s"] > 0 and data["seq_len"] == 2048
    assert main(["predict", "--model", str(tmp_path / "config.json"), "--system", "dgx-h100", "--gpus", "8",
                 "--seq-len", "4096", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["seq_len"] == 4096


def test_analyze_default_scenario_runs():
    r = run_cli("analyze")
    assert r.returncode == 0, r.stderr
    assert "llama3-70b" in r.stdout and "step time" in r.stdout


def test_catalog_lists_everything(capsys):
    assert main(["catalog"]) == 0
    out = capsys.readouterr().out
    for needle in ("A100-SXM4-80GB", "H100-SXM5-80GB", "H200-SXM-141GB", "B200", "GB200", "MI300X",
                   "dgx-a100", "dgx-h100", "dgx-h200", "gb200-nvl72", "gpt3-175b", "llama3-405b", "mixtral-8x7b",
                   "deepseek-v3", "gnmt-lstm", "gpt-1t"):
        assert needle in out


@pytest.mark.parametrize("args, fragment", [
    (["predict", "--model", "llama3-8b", "--system", "dgx-h100", "--gpus", "24", "--tp", "3"], "plan.tp"),
    (["predict", "--model", "llama3-8b", "--system", "dgx-h100", "--gpus", "12", "--tp", "8"], "--gpus"),
    (["predict", "--model", "llama-9", "--system", "dgx-h100"], "unknown model 'llama-9'"),
    (["predict", "no-such.yaml"], "no-such.yaml: no such file"),
    (["predict", "gpt3-175b-a100-1024", "--gbs", "1000"], "plan.gbs"),
])
def test_bad_input_is_one_line_exit_2(args, fragment):
    r = run_cli(*args)
    assert r.returncode == 2
    assert "Traceback" not in r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and fragment in lines[0], r.stderr


def test_malformed_yaml_names_the_file(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("system: [dgx-h100\nmodel: x\n")
    r = run_cli("predict", str(bad))
    assert r.returncode == 2 and "bad.yaml: not valid YAML" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.parametrize("plan_yaml, fragment", [
    ("[1, 2]", "plan: must be a mapping"),
    ("{gbs: 8, bucket_bytes: -5}", "plan.bucket_bytes"),
    ("{gbs: 8, placement: tp}", "plan.placement"),
    ("{dp: 1000000000, gbs: 1000000000}", "num_gpus"),
])
def test_bad_plan_blocks_are_one_line_exit_2(tmp_path, plan_yaml, fragment):
    f = tmp_path / "s.yaml"
    f.write_text(f"system: dgx-h100\nmodel: llama3-8b\nplan: {plan_yaml}\n")
    r = run_cli("predict", str(f))
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == 2 and len(lines) == 1 and fragment in lines[0], r.stderr


@pytest.mark.parametrize("flag, value, fragment", [("--gpus", "0", "--gpus"), ("--seq-len", "0", "model.seq_len")])
def test_zero_flags_are_rejected_not_ignored(flag, value, fragment):
    r = run_cli("predict", "--model", "llama3-8b", "--system", "dgx-h100", flag, value)
    assert r.returncode == 2 and fragment in r.stderr and "Traceback" not in r.stderr


def test_validate_table_reports_failed_cases_per_case(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("schema: validation-corpus/1\ncases:\n"
                 "  - {id: bad-gpu, hardware: {gpu: Z100, num_gpus: 8}, model: gpt-1.7b, plan: {dp: 8, gbs: 8},"
                 " measured: {step_time_s: 1.5}}\n  - 7\n")
    r = run_cli("validate", "--corpus", str(f))
    assert r.returncode == 1 and "Traceback" not in r.stderr  # cases failed: exit 1 (validate --help)
    assert "FAILED bad-gpu: unknown device 'Z100'" in r.stdout and "FAILED case[1]" in r.stdout


def test_plan_flag_on_a_scenario_keeps_its_gpu_count(capsys):
    """`--tp 4` on a 1024-GPU scenario re-derives dp (it used to drop the count and predict 512 GPUs)."""
    assert main(["predict", "gpt3-175b-a100-1024", "--tp", "4", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["num_gpus"] == 1024 and data["plan"]["tp"] == 4 and data["plan"]["dp"] == 32
    assert main(["predict", "gpt3-175b-a100-1024", "--dp", "8", "--json"]) == 0  # an explicit dp sets the count
    assert json.loads(capsys.readouterr().out)["num_gpus"] == 512
