"""`narrowpath simulate`: the JSON contract scripts rely on, the timeline, and bad noise as one line + exit 2."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from narrowpath.cli.main import main


def run_json(capsys, *argv) -> dict:
    assert main(["simulate", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_json_contract(capsys):
    d = run_json(capsys, "llama3-70b-h100-256", "--steps", "5", "--seed", "3", "--noise",
                 "jitter=lognormal:0.05,slow-node=1:0.2,link-flap=scale_out:0.01")
    assert d["seed"] == 3 and d["steps"] == 5
    assert set(d["step_time_s"]) == {"mean", "p50", "p90", "p99", "max"}
    assert d["step_time_s"]["p50"] <= d["step_time_s"]["p99"] <= d["step_time_s"]["max"]
    assert d["closed_form_step_time_s"] > 0 and 0 < d["goodput"] <= 1
    assert {"jitter", "slow-node", "link-flap"} <= set(d["lost_time_s_by_cause"])
    assert all(isinstance(v, float) for v in d["lost_time_s_by_cause"].values())


def test_faults_give_the_long_run_and_goodput(capsys):
    d = run_json(capsys, "llama3-8b-h100-8", "--steps", "2", "--noise", "fail=gpu:2000,horizon=2d,restart=10min")
    lr = d["long_run"]
    assert lr["horizon_s"] == 2 * 86400 and lr["interruptions_by_class"]["gpu"] > 0
    assert d["goodput"] == lr["goodput"] < 1 and "failure rework" in d["lost_time_s_by_cause"]


def test_noise_file(tmp_path, capsys):
    f = tmp_path / "noise.yaml"
    f.write_text("jitter: normal:0.03\nslow-gpu: '2:0.5'\nslow-node: {ids: 0, fraction: 0.1}\n")
    d = run_json(capsys, "llama3-8b-h100-8", "--steps", "2", "--noise", str(f))
    assert set(d["lost_time_s_by_cause"]) >= {"jitter", "slow-gpu", "slow-node"}
    f.write_text("slow-gpu: 2:0.5\n")  # unquoted: YAML's base-60 number, refused with the reason
    assert main(["simulate", "--steps", "1", "--noise", str(f)]) == 2
    assert "quote the value" in capsys.readouterr().err


@pytest.mark.parametrize("text,got", [("- a\n- b\n", "got a list"), ("", "got nothing (an empty file)")])
def test_a_noise_file_that_is_no_mapping_says_so(tmp_path, capsys, text, got):
    f = tmp_path / "noise.yaml"
    f.write_text(text)
    assert main(["simulate", "--steps", "1", "--noise", str(f)]) == 2
    err = capsys.readouterr().err
    assert f"a noise file must hold a mapping of item names to values, {got}" in err and err.count("\n") == 1


def test_default_timeline_ranks_follow_the_pp_axis(tmp_path, capsys):
    """Rank 0 and the first rank of the last stage, wherever the placement puts pp (here not outermost: tp 8,
    pp 2, dp 2 placed tp, cp, ep, pp, dp — the last stage starts at rank 8)."""
    out, scn = tmp_path / "t.json", tmp_path / "s.yaml"
    scn.write_text("system: dgx-h100\nmodel: llama3-8b\nnum_gpus: 32\nplan: {tp: 8, pp: 2, dp: 2, gbs: 16, "
                   "placement: [tp, cp, ep, pp, dp]}\n")
    assert main(["simulate", str(scn), "--steps", "1", "--timeline", str(out)]) == 0
    ev = json.loads(out.read_text())["traceEvents"]
    assert {e["pid"] for e in ev if e["ph"] == "X"} == {0, 8}


def test_timeline_links_ranks(tmp_path, capsys):
    out = tmp_path / "t.json"
    assert main(["simulate", "gpt3-175b-a100-1024", "--steps", "1", "--noise", "jitter=normal:0.02",
                 "--timeline", str(out), "--timeline-ranks", "0,1016"]) == 0
    ev = json.loads(out.read_text())["traceEvents"]
    assert {e["pid"] for e in ev if e["ph"] == "X"} == {0, 1016}
    cats = {e.get("cat") for e in ev}
    assert {"compute", "tp", "pp", "dp", "step"} <= cats
    flows = [e for e in ev if e["ph"] in ("s", "f")]
    assert flows and {e["pid"] for e in flows} == {0, 1016}


@pytest.mark.parametrize("argv,fragment", [
    (["--noise", "jitter=gauss:0.1"], "noise.jitter: must be one of normal, lognormal, pareto"),
    (["--noise", "link-flap=scale_out:1.5"], "noise.link-flap.prob: must be a probability in (0, 1]"),
    (["--noise", "fail=gpu:-3"], "noise.fail.gpu"),
    (["--noise", "slow-node=999:0.2"], "noise.slow-node: node 999 does not exist"),
    (["--noise", "nope.yaml"], "--noise: nope.yaml: no such file"),
    (["--steps", "0"], "--steps: must be >= 1"),
    (["--timeline", "/tmp", "--steps", "1"], "--timeline /tmp: is a directory"),
    (["--schedule", "zb-h1", "llama3-70b-h100-256"], "--schedule zb-h1: needs one chunk per stage"),
    (["--seed", "-1"], "--seed: must be >= 0, got -1"),
    (["--noise", "slow-link=scale_out:0.2:inf"], "noise.slow-link.rank: not a 0-based index"),
    (["--noise", "slow-link=scale_out:0.2:1.7"], "noise.slow-link.rank: not a 0-based index"),
    (["--timeline-ranks", "0"], "--timeline-ranks: only chooses the ranks of a --timeline FILE"),
    (["--timeline", "/tmp/np-sim-t.json", "--timeline-ranks", ","], "--timeline-ranks: expected comma-separated"),
    (["llama3-405b-h100-16k", "--noise", "fail=gpu:1"], "noise: the long run would play ~"),
    (["--noise", "fail=gpu:1000,maintenance=1e-300s"], "noise: the long run would play ~"),
])
def test_bad_input_is_one_line_exit_2(capsys, argv, fragment):
    assert main(["simulate", *argv]) == 2
    err = capsys.readouterr().err
    assert fragment in err and err.count("\n") == 1 and "Traceback" not in err


def test_help_documents_the_grammar():
    out = subprocess.run([sys.executable, "-m", "narrowpath", "simulate", "--help"], capture_output=True, text=True,
                         check=True).stdout
    for form in ("jitter=DIST:CV", "slow-node=IDS:FRACTION", "link-flap=TIER:PROB", "fail=CLASS:MTBF"):
        assert form in out
