"""Cost values the seed-24 mutation sample (benchmarks/mutation.py) found unguarded: the clock under a power cap on
a board with under a watt of dynamic range, and which stage's memory serving reports when two stages hold as
many KV tokens — each pinned by a hand calculation."""
from __future__ import annotations

import math

import pytest

from narrowpath.catalog import model, system
from narrowpath.cost.memory import RUNTIME_RESERVE_BYTES
from narrowpath.cost.power import clock_fraction
from narrowpath.cost.serving_memory import serving_memory
from narrowpath.spec.serving import ServingPlan
from narrowpath.workload.serving import Formats


def test_a_cap_halfway_into_half_a_watt_of_dynamic_power_keeps_sqrt_half_the_clock():
    """P − P_idle ∝ f²: a board rated 10.5 W that idles at 10 W (0.5 W of dynamic power; a device spec may give
    any idle below or near its rating) capped at 10.25 W keeps √(0.25 / 0.5) = 0.7071 of its clock. The floor
    on the rated dynamic power only guards a division by zero; it must not stand in for the 0.5 W."""
    assert clock_fraction(10.5, 10.0, 10.25) == pytest.approx(math.sqrt(0.5), rel=1e-12)


def test_two_stages_holding_as_many_kv_tokens_report_the_first_stages_memory():
    """Llama-3 8B in bf16 on 2 pipeline stages of an H100 (85.9 GB): 16 layers a stage, each of
    4,096·(4,096 + 1,024 + 1,024 + 4,096) + 3·4,096·14,336 + 2·4,096 = 218,112,000 parameters, 2 B each; stage 0
    adds the embedding (128,256·4,096·2 B), stage 1 the output layer (the same) and the final norm
    (4,096·2 = 8,192 B). Stage 0's weights are 16·436,224,000 + 1,050,673,152 = 8,030,257,152 B. Both stages keep
    16·2·8·128·2 = 65,536 B of KV a token, and at 90 % of what weights, workspace and the 2 GB reserve leave, the
    8,192 B between them is 7,373 B of pool, under one token: both hold the same whole number of tokens. The
    memory reported is the first stage with the fewest, stage 0 (not stage 1's 8,192 B more weights and 7,373 B
    less pool)."""
    m, plan, h100 = model("llama3-8b"), ServingPlan(pp=2, weight_precision="bf16", kv_precision="bf16"), \
        system("dgx-h100")
    mem = serving_memory(m, plan, h100, Formats.of(plan, True, m), max_num_tokens=8192, max_batch=256,
                         kv_fraction=0.9, block_tokens=32)
    w0 = 16 * 218_112_000 * 2 + 128_256 * 4096 * 2
    assert w0 == 8_030_257_152
    cap, act = 85.9e9, mem.activation_bytes
    pools = [0.9 * (cap - w - act - RUNTIME_RESERVE_BYTES) for w in (w0, w0 + 8192)]
    assert int(pools[0] / 65_536) == int(pools[1] / 65_536) == mem.kv_tokens  # a tie
    assert mem.weights_bytes == w0
    assert mem.kv_pool_bytes == pytest.approx(pools[0], rel=1e-12)
