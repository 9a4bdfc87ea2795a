"""Sliding-window layers keep only the window's KV (vLLM's hybrid KV cache manager, TensorRT-LLM's per-window
pools, SGLang's SWA pool): capacity, the simulator's blocks and the hand-off (the fiftieth session's review)."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from narrowpath.catalog import model as catalog_model
from narrowpath.cost.serving_memory import kv_footprint_tokens


def test_a_windowed_sequence_holds_the_window_on_its_windowed_share():
    """GPT-OSS-120B: 18 of its 36 layers attend over 128 tokens. A sequence of 9,216 tokens holds the full
    context on half the bytes and the window plus one 16-token block on the other: 0.5 · 9216 + 0.5 · 144 =
    4,680 full-context tokens' worth; one shorter than the window holds itself; no window, the length."""
    assert kv_footprint_tokens(9216, 0.5, 144) == pytest.approx(4680.0)
    assert kv_footprint_tokens(100, 0.5, 144) == pytest.approx(100.0)
    assert kv_footprint_tokens(9216, 0.0, 0) == 9216
    m = catalog_model("gpt-oss-120b")
    assert sum(m.is_window_layer(i) for i in range(m.layers)) == 18 and m.sliding_window == 128


def _serve(n: int, out_len: int) -> dict:
    cmd = [sys.executable, "-m", "narrowpath", "serve", "--model", "gpt-oss-120b", "--system", "dgx-b200",
           "--gpus", "1", "--weights", "fp4", "--offline", "--input-len", "8192", "--output-len", str(out_len),
           "--num-requests", str(n), "--json"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_the_simulator_takes_the_window_blocks_only():
    """8 requests of 8,192 + 64 tokens on one B200 (16-token blocks): at their last step each holds
    ⌈(0.5 · 8256 + 0.5 · 144) / 16⌉ = ⌈262.5⌉ = 263 blocks, 2,104 for the eight (4,128 counted on every layer,
    516 each). The memory reports the windowed share and the window kept."""
    d = _serve(8, 64)
    kv = d["kv_cache"]
    assert kv["peak_utilisation"] * kv["blocks_per_lane"] == pytest.approx(2104)
    mem = d["memory_per_gpu"]
    assert mem["window_share"] == pytest.approx(0.5) and mem["window_tokens"] == 128 + 16


def test_the_fit_check_counts_the_window():
    """GPT-OSS-120B at tp 2 on two H100 with FP8 weights and a small KV share (0.18, batch limit 8): a lane holds
    ~7,455 blocks of 16 tokens; a request of 120,000 + 8,000 tokens needs 8,000 counted on every layer at full
    context, but ⌈(0.5 · 128,000 + 0.5 · 144) / 16⌉ = 4,005 with the windowed half holding its window: it fits
    (it was refused)."""
    import math

    from narrowpath.catalog import system
    from narrowpath.schedule.serving_defaults import resolve_formats, resolve_limits
    from narrowpath.schedule.serving_run import check_fits
    from narrowpath.spec.serving import Load, ServingPlan, ServingScenario
    scn = ServingScenario(system=system("dgx-h100"), model=catalog_model("gpt-oss-120b"),
                          plan=ServingPlan(tp=2, weight_precision="fp8", kv_memory_fraction=0.18, max_batch=8),
                          num_gpus=2, load=Load(arrival="offline", input_tokens=120_000, output_tokens=8_000,
                                                num_requests=2))
    _, lim = resolve_limits(resolve_formats(scn, ()))
    assert math.ceil(128_000 / 16) > lim.lane_blocks(1) >= math.ceil(lim.memory.footprint(128_000) / 16) == 4005
    check_fits(scn)
