"""The command line carries the model's numbers unchanged: `predict --json` against hand-derived figures."""
from __future__ import annotations

import json

from narrowpath.cli.main import main


def test_predict_json_model_flops_by_hand(capsys):
    """Llama-3 8B, 8 H100, tp 8, global batch 8 × 8192 tokens: model FLOPs per token 57,912,852,480 (see
    tests/workload/test_golden_counts.py), per step × 65,536 = 3,795,376,700,129,280; 8 micro-batches of 1;
    tokens/s × step time = 65,536."""
    assert main(["predict", "--model", "llama3-8b", "--system", "dgx-h100", "--gpus", "8", "--tp", "8", "--gbs", "8",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["model_flop_per_step"] == 57_912_852_480 * 65_536
    assert out["num_microbatches"] == 8 and out["seq_len"] == 8192
    assert abs(out["tokens_per_s"] * out["step_time_s"] - 65_536) < 1e-6
    assert abs(out["mfu"] - out["model_flop_per_step"] / (out["step_time_s"] * 8 * 989.4e12)) < 1e-9
