"""Review of the forty-first session: a device that gives no L2 level (an inline `hardware` device may list only
sram / hbm) prices a per-query-head decode's re-reads at HBM bandwidth (cost.roofline.l2_bw_bytes_per_s falls back to
HBM's: 're-reads then priced as if no cache held them'). Its accounts must then say HBM, not charge the time to an
`l2: kv cache re-reads` row of a level the device does not have, nor tell the reader the cache is read 'through L2'.

By hand: Mistral 7B, tp 1, FP8 KV (2·8·128·1 = 2,048 B per token and layer), 64 decodes over 128,000 context tokens
read 262,144,000 B of KV and 64·32·(128 + 128)·2 = 1,048,576 B of queries and outputs once from HBM; four query heads
per kv head stream 4 · 262,144,000 B. Without an L2 level all of that is HBM traffic at 4.8 TB/s: the op's memory
time is 4 · 262,144,000 / 4.8e12 over the profile's bandwidth share, and the 32 layers' time goes to `hbm:` rows."""
from __future__ import annotations

import dataclasses

import pytest

from narrowpath.analysis.serving_accounts import L2_REREAD_KEY, serving_accounts, time_split
from narrowpath.catalog import system
from narrowpath.schedule.serving_cost import ServingCost
from narrowpath.schedule.serving_defaults import resolve_formats, resolve_limits
from narrowpath.schedule.serving_run import simulate
from narrowpath.spec.parse import model_from_dict
from narrowpath.spec.serving import Load, ServingPlan, ServingScenario

MISTRAL_7B = dict(name="mistral-7b", layers=32, hidden=4096, heads=32, kv_heads=8, ffn=14336, vocab=32000,
                  ffn_act="swiglu", seq_len=4096)
PLAN = ServingPlan(framework="TensorRT-LLM 0.8.0", weight_precision="fp8", kv_precision="fp8")


def _system(with_l2: bool):
    sysm = system("dgx-h200")
    if with_l2:
        return sysm
    dev = sysm.device
    return dataclasses.replace(sysm, device=dataclasses.replace(
        dev, levels=tuple(lv for lv in dev.levels if lv.name != "l2")))


def _split(with_l2: bool) -> tuple[dict[str, float], float]:
    load = Load(arrival="offline", input_tokens=128, output_tokens=64, num_requests=8)
    scn = ServingScenario(system=_system(with_l2), model=model_from_dict(MISTRAL_7B), plan=PLAN, load=load,
                          num_gpus=1)
    scn, _ = resolve_limits(resolve_formats(scn, ()))
    cost = ServingCost(scn, 2048)
    ops = cost.attention_ops(0, 64, 128_000, 0, 0, 0)
    return time_split(cost, ops, [], 128_000 * 2048), cost.cal.vector_bw_efficiency


@pytest.mark.parametrize("with_l2", [True, False])
def test_re_reads_are_charged_to_the_level_that_serves_them(with_l2):
    split, eff = _split(with_l2)
    if with_l2:  # 4 · 4.8 / 7.0 > 1: the L2 roof binds and the row says so
        assert split[L2_REREAD_KEY] == pytest.approx(32 * 4 * 262_144_000 / 7.0e12 / eff, rel=1e-9)
        return
    assert L2_REREAD_KEY not in split
    hbm = split.get("hbm: kv cache", 0.0) + split.get("hbm: activations", 0.0)
    assert hbm == pytest.approx(32 * 4 * 262_144_000 / 4.8e12 / eff, rel=1e-9)


def test_the_kv_note_does_not_send_the_cache_through_a_missing_l2():
    load = Load(arrival="fixed-batch", batch_size=64, input_tokens=2048, output_tokens=128)
    scn = ServingScenario(system=_system(False), model=model_from_dict(MISTRAL_7B), plan=PLAN, load=load,
                          num_gpus=1)
    acc = serving_accounts(simulate(scn))
    assert L2_REREAD_KEY not in acc.time_split
    row = {row.item: row for row in acc.distance}["kv_cache"]
    assert "through L2" not in row.note and "from HBM each time" in row.note
    # all four reads come from HBM: 4 · mean context · 2,048 B · 32 layers per generated token
    assert row.bytes_read_per_token == pytest.approx(4 * acc.mean.decode_ctx * 2048 * 32 / acc.mean.output_tokens,
                                                     rel=1e-12)
