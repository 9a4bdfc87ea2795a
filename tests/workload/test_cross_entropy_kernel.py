"""The loss's kernel as the stack runs it (plan.cross_entropy, workload.loss): Megatron's unfused vocab-parallel
cross entropy over FP32 logits, or Transformer Engine's fused one (Megatron-Bridge's recipes: cross_entropy_loss_fusion
with cross_entropy_fusion_impl "te"), from the fifty-third session's review of dense pricing."""
from __future__ import annotations

import json

import numpy as np
import pytest

from narrowpath.catalog import model, system
from narrowpath.cli.common import load_any_scenario
from narrowpath.cli.main import main
from narrowpath.errors import SpecError
from narrowpath.schedule.step import predict
from narrowpath.search import SearchSpace
from narrowpath.search.bulk import Bulk
from narrowpath.search.each import scenario_of
from narrowpath.search.parts import Parts
from narrowpath.search.table import build_table
from narrowpath.spec import Plan, Scenario
from narrowpath.spec.parse import plan_from_dict
from narrowpath.validate.corpus import shipped_corpus_path
from narrowpath.workload.build import _embedding_work
from tests.cli.one_line import one_line_error

CORPUS = str(shipped_corpus_path("training-sweeps-public.yaml"))


def _scn(**plan) -> Scenario:
    p = Plan(**{**dict(tp=2, dp=4, sequence_parallel=True, precision="bf16", mbs=1, gbs=8, zero_stage=1), **plan})
    return Scenario(name="ce", system=system("dgx-h100"), model=model("llama3-8b"), plan=p, num_gpus=8)


def _loss(scn):
    ops, _ = _embedding_work(scn, False, True)
    return {op.phase: op for op, _ in ops if op.name == "cross_entropy"}


def test_the_loss_kernels_by_hand():
    """Llama-3 8B on tp 2, 8,192 tokens: 8192 · 128,256/2 = 525,336,576 logits a rank. Unfused FP32: 16 B a logit
    forward in 4 kernels (8,405,385,216 B) and 12 B backward in 2 (6,304,038,912 B). Transformer Engine's: the
    BF16 logits read twice and the gradient written once forward (3 · 2 B: 3,152,019,456 B, 2 kernels), the
    gradient scaled in place backward (2 · 2 B: 2,101,346,304 B, 1 kernel)."""
    un, te = _loss(_scn()), _loss(_scn(cross_entropy="te"))
    assert (un["fwd"].hbm_bytes, un["fwd"].kernels, un["bwd"].hbm_bytes, un["bwd"].kernels) == \
        (8_405_385_216, 4, 6_304_038_912, 2)
    assert (te["fwd"].hbm_bytes, te["fwd"].kernels, te["bwd"].hbm_bytes, te["bwd"].kernels) == \
        (3_152_019_456, 2, 2_101_346_304, 1)


def test_the_fused_loss_holds_no_fp32_copy():
    """pp 1, no recompute, ZeRO-1: the largest temporary is the loss's — the BF16 logits and their FP32 softmax
    unfused, 525,336,576 · 6 = 3,152,019,456 B; the logits alone fused, 1,050,673,152 B."""
    un, te = predict(_scn()), predict(_scn(cross_entropy="te"))
    assert un.memory.items["temporaries"] == pytest.approx(3_152_019_456, rel=1e-12)
    assert te.memory.items["temporaries"] == pytest.approx(1_050_673_152, rel=1e-12)
    assert te.step_time_s < un.step_time_s


def test_megatron_bridge_runs_the_fused_loss_and_other_stacks_do_not():
    """A Megatron-Bridge corpus row takes `te` from its stack (catalog/stacks.yaml), a NeMo 2 row keeps Megatron-Core's
    default; a stated value is never changed; a value outside the two is refused naming the field."""
    bridge = load_any_scenario(CORPUS + "#mb26-04-llama3-70b-h100-n64-gbs256-fp8-tp4pp8cp1ep1vp5mbs1")
    nemo = load_any_scenario(CORPUS + "#nemo25-07-llama3-70b-gb200-n64-gbs128-alt")
    assert bridge.plan.cross_entropy == "te" and nemo.plan.cross_entropy == "unfused"
    with pytest.raises(SpecError, match="plan.cross_entropy"):
        plan_from_dict(dict(tp=1, cross_entropy="fused"))


def test_the_flag_and_its_bad_value(capsys):
    assert main(["predict", "llama3-8b-h100-8", "--cross-entropy", "te", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["plan"]["cross_entropy"] == "te"
    with pytest.raises(SystemExit) as e:  # argparse's own refusal of a choice: exit 2, one line naming the flag
        main(["predict", "llama3-8b-h100-8", "--cross-entropy", "fused"])
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert e.value.code == 2 and len(err) == 1 and "--cross-entropy" in err[0] and "Traceback" not in err[0]
    one_line_error(capsys, ["predict", "--model", "llama3-8b", "--system", "dgx-h100", "--gpus", "8",
                            "--cross-entropy", "te", "--precision", "fp16", "--grad-precision", "bf16"],
                   "plan.grad_precision")


def test_search_memory_is_predicts_with_the_fused_loss():
    """The search's bulk memory reads the base plan's loss kernel for the head stage's temporary, as predict."""
    scn = _scn(cross_entropy="te", gbs=32)
    space = SearchSpace(scn.model, scn.system, 8, 32, scn.plan, {"cp": 1})
    table = build_table(space)
    rows = np.sort(np.random.default_rng(53).choice(table.num_structural, size=min(30, table.num_structural),
                                                    replace=False))
    bulk = Bulk(table, Parts(scenario_of(scn, space, space.base), None))
    sp = bulk.structural(rows)
    for i, r in enumerate(rows):
        plan = table.plan(int(table.starts[r]))
        assert plan.cross_entropy == "te"
        assert sp.memory_bytes[i] == pytest.approx(predict(scenario_of(scn, space, plan)).memory.total_bytes,
                                                   rel=1e-12), plan
