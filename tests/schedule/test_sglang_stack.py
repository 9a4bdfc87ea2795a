"""SGLang v0.5 as it runs by default: prefill-first iterations, one-token KV pages, the chunk and CUDA graph limits by
GPU memory and tp (`ServerArgs._handle_gpu_memory_settings`), the capture list (`_generate_cuda_graph_batch_sizes`),
max_running_requests = min(KV tokens // 2, the request pool). Values by hand from those rules."""
from __future__ import annotations

import dataclasses

from narrowpath.catalog import model, system
from narrowpath.catalog.serving import serving_stack
from narrowpath.schedule.serving_cost import ServingCost
from narrowpath.schedule.serving_defaults import (resolve_limits, sglang_default_limits, sglang_graph_sizes,
                                                  sglang_request_pool)
from narrowpath.spec.serving import Load, ServingPlan, ServingScenario
from tests.search.scenarios import device_with_memory

LOAD = Load(arrival="offline", input_tokens=1024, output_tokens=256, num_requests=100)


def _with_memory(gib: float):
    return device_with_memory(system("dgx-h100").device, gib * 2**30)


def test_limits_by_gpu_memory_and_tp():
    """H100 80 GB: 8,192-token chunks, graphs to 256 (512 at tp ≥ 4); H200 141 GB the same; B200 179 GiB: 16,384 and
    512; A100 40 GB: 4,096 and 32 (160 at tp 4); below 20 GiB 2,048 and 8; the bounds are strict (< 90 GiB)."""
    assert sglang_default_limits(system("dgx-h100").device, 1) == (8192, 256)
    assert sglang_default_limits(system("dgx-h100").device, 4) == (8192, 512)
    assert sglang_default_limits(system("dgx-h200").device, 2) == (8192, 256)
    assert sglang_default_limits(system("dgx-b200").device, 1) == (16384, 512)
    a100_40 = _with_memory(40)
    assert sglang_default_limits(a100_40, 1) == (4096, 32) and sglang_default_limits(a100_40, 4) == (4096, 160)
    assert sglang_default_limits(_with_memory(19.9), 8) == (2048, 8)
    assert sglang_default_limits(_with_memory(34.9), 4) == (2048, 80)
    assert sglang_default_limits(_with_memory(160), 1) == (16384, 512)
    assert sglang_default_limits(_with_memory(159.9), 1) == (8192, 256)


def test_the_capture_list():
    """1, 2, 4, 8, 12, every 8 from 16 to 256 (31), every 16 from 272 to 496 (15), every 32 from 512."""
    assert sglang_graph_sizes(8) == (1, 2, 4, 8)
    assert sglang_graph_sizes(256)[-3:] == (240, 248, 256) and len(sglang_graph_sizes(256)) == 36
    big = sglang_graph_sizes(640)
    assert big[36:38] == (272, 288) and big[50:] == (496, 512, 544, 576, 608, 640)
    assert sglang_graph_sizes(160)[-1] == 160


def _scn(mdl="llama3-8b", **plan) -> ServingScenario:
    p = ServingPlan(tp=1, framework="SGLang 0.5.4", **plan)
    return ServingScenario(system=system("dgx-h100"), model=model(mdl), plan=p, load=LOAD, num_gpus=p.num_gpus)


def test_resolve_limits_fills_sglangs_defaults_and_caps_the_running_requests():
    """Llama-3 8B on one H100: 4,096 running requests (the pool, int(~450k KV tokens / its 8,192-token context
    limit × 512) = ~28,000 held to its 4,096 ceiling; half the KV is far more), 8,192 tokens a chunk, graphs to 256 —
    each noted. Llama-3 70B FP8 on one H100 with 5 % of the free memory for KV (~2,600
    tokens): half of it caps the running requests, noted once however often the limits are resolved; a stated
    max_batch is kept."""
    scn, lim = resolve_limits(_scn())
    assert (lim.max_batch, lim.max_num_tokens, lim.block_tokens) == (4096, 8192, 1)
    notes = dict(scn.chosen)
    assert notes["max running requests"] == (f"4096 — SGLang's request pool for {lim.memory.kv_tokens} KV tokens at "
                                             f"a context limit of 8192")
    assert notes["max_batch"] == ("2048 — SGLang's default on H100-SXM5-80GB (chunked_prefill_size; the running "
                                  "requests follow from the KV pool once it is known: see 'max running requests')")
    assert scn.plan.graph_batch_sizes == sglang_graph_sizes(256) and scn.plan.policy == "prefill-first"
    assert "cuda_graph_max_bs 256 on H100-SXM5-80GB at tp 1" in notes["graph_batch_sizes"]
    scn, lim = resolve_limits(_scn("llama3-70b", weight_precision="fp8", kv_precision="fp8", kv_memory_fraction=0.05))
    half = lim.memory.kv_tokens // 2
    assert lim.max_batch == half < 2048
    assert dict(scn.chosen)["max running requests"] == (f"{half} — SGLang's half of the KV pool's "
                                                         f"{lim.memory.kv_tokens} tokens")
    again, lim2 = resolve_limits(scn)
    assert lim2.max_batch == half and [k for k, _ in again.chosen].count("max running requests") == 1
    _, lim = resolve_limits(_scn("llama3-70b", weight_precision="fp8", kv_precision="fp8", kv_memory_fraction=0.05,
                          max_batch=2048))
    assert lim.max_batch == 2048


def test_prompt_iterations_are_issued_eagerly_and_decodes_pad():
    """Extend batches run without graphs (piecewise graphs off in v0.5): the host issues each kernel; a decode batch
    of 100 pads to 104 on the list."""
    assert serving_stack("SGLang")["eager_prefill"] is True
    scn, lim = resolve_limits(_scn())
    cost = ServingCost(scn, lim.max_num_tokens)
    assert cost.eager_prefill and cost.decode_graph(100) == 104 and cost.decode_graph(300) is None


def test_each_row_of_the_memory_table_from_its_lower_bound():
    """A row starts at the previous bound: 20 GiB → (2,048; 24 / 80), 35 → (4,096; 32 / 160), 60 → (8,192;
    256 / 512); the tp < 4 column below 20 GiB is 8, the tp ≥ 4 column below 160 GiB 512."""
    assert sglang_default_limits(_with_memory(20), 1) == (2048, 24)
    assert sglang_default_limits(_with_memory(35), 4) == (4096, 160)
    assert sglang_default_limits(_with_memory(60), 1) == (8192, 256)
    assert sglang_default_limits(_with_memory(19.9), 1) == (2048, 8)
    assert sglang_default_limits(_with_memory(34.9), 1) == (2048, 24)
    assert sglang_default_limits(_with_memory(159.9), 4) == (8192, 512)
    assert sglang_graph_sizes(16) == (1, 2, 4, 8, 12, 16)


def test_a_pool_exactly_at_the_cap_adds_no_note(monkeypatch):
    """Half the KV tokens equal to the running-request limit caps nothing: no 'max running requests' note."""
    from narrowpath.schedule import serving_defaults
    plan = dict(weight_precision="fp8", kv_precision="fp8", kv_memory_fraction=0.05)
    cap = 2048
    for _ in range(10):  # the pool depends a little on the batch limit (activations): find the fixed point
        monkeypatch.setattr(serving_defaults, "SGLANG_MAX_RUNNING", cap)
        scn, lim = resolve_limits(_scn("llama3-70b", **plan))
        if lim.memory.kv_tokens // 2 == cap:
            break
        cap = lim.memory.kv_tokens // 2
    assert lim.memory.kv_tokens // 2 == cap == lim.max_batch
    assert "max running requests" not in dict(scn.chosen)


def test_the_finer_graph_whatif_sees_the_list_sglang_fills():
    """The what-ifs start from the plan as given, before the limits are filled; SGLang's list is filled then (per
    device and tp), so the finer-sizes what-if reads the run's resolved list (as serving_verdict passes it): every 8
    to 256 holds tech blog 20's list, and the what-if is skipped as already captured, not as 'not held to a list'."""
    from narrowpath.analysis.serving_whatif import candidates
    resolved = resolve_limits(_scn())[0].plan
    _, skipped = candidates(_scn(), False, 256, resolved.policy, resolved.graph_batch_sizes)
    assert "already captured" in dict(skipped)["finer CUDA graph sizes"]


def test_the_request_pool_follows_the_context_limit():
    """int(KV / context × 512) within [2,048, 4,096] (ModelRunner): 460,000 tokens at 8,192 → 28,750 → 4,096; at
    131,072 → 1,796 → 2,048; 600,000 at 100,000 → 3,072; no stated limit → the floor."""
    assert sglang_request_pool(460_000, 8192) == 4096
    assert sglang_request_pool(460_000, 131072) == 2048
    assert sglang_request_pool(600_000, 100_000) == 3072
    assert sglang_request_pool(460_000, 0) == 2048
    long = dataclasses.replace(model("llama3-8b"), context_len=131072)
    scn = dataclasses.replace(_scn(), model=long)
    _, lim = resolve_limits(scn)
    assert lim.max_batch == 2048 and "max running requests" not in dict(resolve_limits(scn)[0].chosen)
