"""Review of the forty-first session: the KV cache's distance row says how often a decode reads the cache ("reads its
whole context 4 times per token ... from HBM each time" under TensorRT-LLM 0.5/0.6, whose masked kernel fetches a kv
head's cache from HBM once per query head). The row's own figure, the bytes it reads per generated token from its
level (HBM), must count those reads too — else the row says 4 reads from HBM and shows one.

By hand: Llama-3 8B (32 layers, 8 kv heads of 128, FP8 KV: 2·8·128·1 = 2,048 B per token and layer), tp 1, pp 1;
per generated token the mean iteration's decodes read mean.decode_ctx · 2,048 B · 32 layers / mean.output_tokens once,
and 32 / 8 = 4 times under TensorRT-LLM 0.5 (from HBM each time); TensorRT-LLM 0.8 reads it from HBM once (its other
three reads come through L2) and a FlashDecoding-style stack (0.17) once."""
from __future__ import annotations

import pytest

from narrowpath.analysis.serving_accounts import serving_accounts
from narrowpath.catalog import model, system
from narrowpath.schedule.serving_run import simulate
from narrowpath.spec.serving import Load, ServingPlan, ServingScenario


@pytest.mark.parametrize("framework, reads", [("TensorRT-LLM 0.5.0", 4), ("TensorRT-LLM 0.8.0", 1),
                                              ("TensorRT-LLM 0.17", 1)])
def test_the_kv_rows_bytes_count_every_read_from_its_level(framework, reads):
    load = Load(arrival="fixed-batch", batch_size=32, input_tokens=1024, output_tokens=64)
    plan = ServingPlan(framework=framework, weight_precision="fp8", kv_precision="fp8")
    scn = ServingScenario(system=system("dgx-h100"), model=model("llama3-8b"), plan=plan, load=load, num_gpus=1)
    acc = serving_accounts(simulate(scn))
    row = {r.item: r for r in acc.distance}["kv_cache"]
    once = acc.mean.decode_ctx * 2048 * 32 / acc.mean.output_tokens
    assert row.level == "hbm"
    assert row.bytes_read_per_token == pytest.approx(reads * once, rel=1e-12)
    assert ("4 times per token" in row.note) == (framework != "TensorRT-LLM 0.17")
