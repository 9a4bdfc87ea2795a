"""The validation corpus is the contract: read any validation-corpus/1 file; meet the accuracy targets."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from narrowpath.cli.main import main
from narrowpath.validate.corpus import load_corpus, shipped_corpus_path
from narrowpath.validate.run import run_validation

SHARED_DIR = Path(__file__).resolve().parents[3] / "shared" / "validation"
SHIPPED_SHA256 = {
    # sha256 of the unmodified copies of shared/validation/ (and benchmarks/data/) the package ships: the corpora
    # are checked in every clone, with or without shared/ next to it
    "training-public.yaml": "9a560b1786595664bbf4039824548d57a853ccce23835b34dc45d9e1e1947923",
    "training-sweeps-public.yaml": "7f25aef698fb22191f872224313953cae37ad5f24fc2e3ef3990e73eaa76b3ab",
    "published-extra.yaml": "af2bfc37efa305c89a70c70234ccb8c64b2482fd6057bdf6bd48263caeda68ae",
    "inference-public.yaml": "89c8b05a0b1b7beeb5b6f6754ea83e4fba3eb2c874802962486b84043e5b299c",
}


@pytest.mark.parametrize("name", sorted(SHIPPED_SHA256))
def test_shipped_corpora_are_unmodified_copies(name):
    """The shipped copy has the recorded checksum; where shared/validation (or benchmarks/data) is next to the
    clone, the copy equals it byte for byte."""
    shipped = shipped_corpus_path(name)
    assert hashlib.sha256(shipped.read_bytes()).hexdigest() == SHIPPED_SHA256[name]
    for origin in (SHARED_DIR / name, Path(__file__).resolve().parents[2] / "benchmarks" / "data" / name):
        if origin.exists():
            assert origin.read_bytes() == shipped.read_bytes(), origin


def test_accuracy_targets_on_public_corpus():
    """Issue 2 targets: mean |error| <= 5 % and worst <= 10 % over all 18 cases, one calibration per device."""
    rep = run_validation(shipped_corpus_path("training-public.yaml"))
    assert len(rep.cases) == 18 and len(rep.ok_cases) == 18
    assert rep.mean_abs_error <= 0.05, rep.mean_abs_error
    assert rep.max_abs_error <= 0.10, (rep.worst.id, rep.max_abs_error)


def test_validate_json_schema(capsys):
    """The issue-10 contract: groups, ranking, and per case id/predicted/measured/error/chosen."""
    assert main(["validate", "--corpus", str(shipped_corpus_path("training-sweeps-public.yaml")), "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert {"cases", "mean_abs_error", "max_abs_error", "groups", "ranking"} <= set(data)
    assert {g["kind"] for g in data["groups"]} == {"hardware", "precision", "family", "source"}
    assert all({"name", "kind", "n", "mean_abs_error", "max_abs_error"} <= set(g) for g in data["groups"])
    assert {"pairs", "order_agreement", "top1_regret_mean", "top1_regret_max"} <= set(data["ranking"])
    case = next(c for c in data["cases"] if c["error"] is not None)
    assert {"id", "predicted_step_time_s", "measured_step_time_s", "error", "chosen"} <= set(case)
    assert "recompute" in case["chosen"]  # every sweep case leaves recompute unpublished: the tool says its choice
    assert case["error"] == pytest.approx((case["predicted_step_time_s"] - case["measured_step_time_s"])
                                          / case["measured_step_time_s"])


def test_bad_cases_are_reported_per_case_not_a_crash(tmp_path, capsys):
    corpus = tmp_path / "c.yaml"
    corpus.write_text("""schema: validation-corpus/1
cases:
- id: good
  model: {layers: 24, hidden: 2304, heads: 24, kv_heads: 24, ffn: 9216, ffn_act: gelu, vocab: 51200, seq_len: 2048}
  hardware: {gpu: A100-SXM4-80GB, num_gpus: 8, gpus_per_node: 8, nic_gbps_per_gpu: 200}
  plan: {tp: 1, pp: 1, dp: 8, ep: 1, cp: 1, vpp: 1, mbs: 4, gbs: 32, zero_stage: 0, recompute: none,
         sequence_parallel: false, precision: fp16}
  measured: {step_time_s: 1.0}
- id: unknown-gpu
  model: {layers: 24, hidden: 2304, heads: 24, vocab: 51200, seq_len: 2048}
  hardware: {gpu: TPU-v9, num_gpus: 8, gpus_per_node: 8}
  plan: {dp: 8, mbs: 1, gbs: 8}
  measured: {step_time_s: 1.0}
- id: no-measurement
  model: {layers: 24, hidden: 2304, heads: 24, vocab: 51200, seq_len: 2048}
  hardware: {gpu: A100-SXM4-80GB, num_gpus: 8}
  plan: {dp: 8, mbs: 1, gbs: 8}
- id: inconsistent
  model: {layers: 24, hidden: 2304, heads: 24, vocab: 51200, seq_len: 2048}
  hardware: {gpu: A100-SXM4-80GB, num_gpus: 16}
  plan: {dp: 8, mbs: 1, gbs: 8}
  measured: {step_time_s: 1.0}
- just a string
""")
    cases = {c.id: c for c in load_corpus(corpus)}
    assert cases["good"].scenario is not None
    assert "unknown device 'TPU-v9'" in cases["unknown-gpu"].error
    assert "measured.step_time_s" in cases["no-measurement"].error
    assert "num_gpus 16" in cases["inconsistent"].error
    assert main(["validate", "--corpus", str(corpus), "--json"]) == 1  # a case failed: non-zero, for CI
    data = json.loads(capsys.readouterr().out)
    assert data["num_cases"] == 5 and data["num_failed"] == 4
    assert data["mean_abs_error"] == pytest.approx(abs(data["cases"][0]["error"]))


def test_wrong_schema_is_one_clear_error(tmp_path):
    f = tmp_path / "x.yaml"
    f.write_text("schema: other/2\ncases: []\n")
    from narrowpath.errors import NarrowpathError
    with pytest.raises(NarrowpathError, match="is not 'validation-corpus/1'"):
        load_corpus(f)


def test_held_out_corpus_reads_and_predicts_every_case():
    """The development corpus of other published runs (FSDP, flash, FP8, H100) is read and predicted in full."""
    path = Path(__file__).resolve().parents[2] / "benchmarks" / "data" / "published-extra.yaml"
    rep = run_validation(path)
    assert len(rep.cases) == 31 and len(rep.ok_cases) == 31
    assert all(0 < c.mfu < 1 for c in rep.ok_cases)
