"""vLLM V1 as its releases 0.11-0.27 run by default: batch limits by device and entry point
(`EngineArgs._set_default_args` / `get_batch_defaults`), decode batches padded to the next captured CUDA graph size
(`VllmConfig._set_cudagraph_sizes`, `pad_for_cudagraph`), none above the largest. Values by hand from those rules."""
from __future__ import annotations

import dataclasses

import pytest

from narrowpath.catalog import model, system
from narrowpath.catalog.serving import serving_stack
from narrowpath.schedule.serving_cost import ServingCost
from narrowpath.schedule.serving_defaults import resolve_limits, vllm_default_limits
from narrowpath.spec.serving import Load, ServingPlan, ServingScenario
from tests.search.scenarios import device_with_memory

VLLM_SIZES = [1, 2, 4] + list(range(8, 256, 8)) + list(range(256, 513, 16))
"""[1, 2, 4] + every 8 below 256 + every 16 from 256 to min(max_num_seqs · 2, 512) = 512 (51 sizes)."""


def test_default_limits_by_device_and_entry_point():
    """≥ 70 GiB and not an A100: 1,024 sequences, 16,384 tokens offline (the LLM class) / 8,192 served; an A100 of
    80 GB and one of 40 GB, below the threshold or carved out by name: 256 sequences, 8,192 / 2,048 tokens. A
    96 GB RTX PRO 6000 and a B200 are 'large' by the rule's letter."""
    for name, big in (("dgx-h100", True), ("dgx-h200", True), ("dgx-b200", True), ("rtx-pro-6000-server", True),
                      ("dgx-a100", False), ("dgx-a100-320gb", False)):
        dev = system(name).device
        assert vllm_default_limits(dev, True) == ((1024, 16384) if big else (256, 8192)), name
        assert vllm_default_limits(dev, False) == ((1024, 8192) if big else (256, 2048)), name


def _scn(load: Load, sysname: str = "dgx-h100", **plan) -> ServingScenario:
    p = ServingPlan(tp=1, framework="vLLM 0.11", **plan)
    return ServingScenario(system=system(sysname), model=model("llama3-8b"), plan=p, load=load, num_gpus=1)


def test_resolve_limits_takes_the_entry_points_default_and_says_why():
    """An offline load (all queued at once, `vllm bench throughput`) takes the LLM class's values; a Poisson stream
    and a closed loop (a client against `vllm serve`) the server's. A stated limit is kept, the other filled."""
    off = Load(arrival="offline", input_tokens=512, output_tokens=128, num_requests=100)
    scn, lim = resolve_limits(_scn(off))
    assert (lim.max_batch, lim.max_num_tokens) == (1024, 16384)
    assert "offline LLM class" in dict(scn.chosen)["max_batch"] and "H100" in dict(scn.chosen)["max_batch"]
    for load in (Load(arrival="poisson", rate_per_s=5.0, input_tokens=512, output_tokens=128, num_requests=100),
                 dataclasses.replace(off, concurrency=16)):
        scn, lim = resolve_limits(_scn(load))
        assert (lim.max_batch, lim.max_num_tokens) == (1024, 8192)
        assert "OpenAI server" in dict(scn.chosen)["max_num_tokens"]
    _, lim = resolve_limits(_scn(off, "dgx-a100"))
    assert (lim.max_batch, lim.max_num_tokens) == (256, 8192)
    _, lim = resolve_limits(_scn(off, max_batch=64))
    assert (lim.max_batch, lim.max_num_tokens) == (64, 16384)


def _cost(max_batch: int, max_num_tokens: int = 8192) -> ServingCost:
    load = Load(arrival="offline", input_tokens=128, output_tokens=2048, num_requests=100)
    scn = _scn(load, max_batch=max_batch, max_num_tokens=max_num_tokens)
    return ServingCost(resolve_limits(scn)[0], max_num_tokens)


def test_decode_batches_pad_to_the_next_captured_size():
    """The stack lists vLLM's sizes; with 1,024 sequences every size to 512 is captured and nothing above (a batch
    of 600 runs without a graph); with 256 the list stops at 256. 300 decodes over 300,000 context tokens cost what
    304 decodes over 300,004 tokens cost without a list (4 one-token dummies), the host's work over 300 requests."""
    assert serving_stack("vLLM 0.11")["graph_batch_sizes"] == VLLM_SIZES
    assert serving_stack("vLLM 0.11")["graph_padding"] is True
    cost = _cost(1024)
    assert list(cost.graph_sizes) == VLLM_SIZES
    assert cost.decode_graph(300) == 304 and cost.decode_graph(512) == 512 and cost.decode_graph(600) is None
    assert list(_cost(256).graph_sizes) == VLLM_SIZES[:VLLM_SIZES.index(256) + 1]
    padded = cost.iteration_s(300, 300, 300e3)
    cost.graph_sizes = None
    assert padded == pytest.approx(cost.iteration_s(304, 304, 300e3 + 4, rows=304, requests=300), rel=1e-12)
    assert padded > cost.iteration_s(300, 300, 300e3)


def _with_memory(gib: float, name: str = "H100-SXM5-80GB"):
    return device_with_memory(system("dgx-h100").device, gib * 2**30, name=name)


def test_the_large_gpu_threshold_is_70_gib_inclusive():
    """`device_memory >= 70 * GiB_bytes`: exactly 70 GiB is large, a byte less (or 48 GiB, an L40S's) is not, and
    the A100 carve-out goes by name at any size."""
    assert vllm_default_limits(_with_memory(70), False) == (1024, 8192)
    assert vllm_default_limits(_with_memory(70 - 2**-30), False) == (256, 2048)
    assert vllm_default_limits(_with_memory(48), True) == (256, 8192)
    assert vllm_default_limits(_with_memory(141, "A100-custom"), True) == (256, 8192)


def test_the_limit_notes_read_in_full():
    """Each filled limit says which of vLLM's entry points it follows and on which GPU."""
    off = Load(arrival="offline", input_tokens=512, output_tokens=128, num_requests=100)
    scn, _ = resolve_limits(_scn(off))
    assert dict(scn.chosen)["max_batch"] == "1024 — vLLM's default for the offline LLM class on H100-SXM5-80GB"
    scn, _ = resolve_limits(_scn(dataclasses.replace(off, concurrency=4)))
    assert dict(scn.chosen)["max_num_tokens"] == "8192 — vLLM's default for its OpenAI server on H100-SXM5-80GB"


def test_a_stage_boundary_is_as_slow_as_its_slowest_pair():
    """128 GB200 GPUs (NVL72 racks packed 72 ranks a rack) serving with tp 16 per stage and pp 8: stage k holds
    ranks 16k … 16k + 15 and each sends to the rank 16 above. Stage 3 (ranks 48–63) sends to 64–79: ranks 56–63 reach
    72–79 in the next rack, so the boundary crosses the fabric although its first pair (48 → 64) does not; stage 4
    (64–79 → 80–95) too; stage 2 (32–47 → 48–63) stays in the rack. Placed 64 a rack (the catalog's segment, as the
    instance's groups are: System.job_domain) only stage 3's boundary leaves its rack."""
    import dataclasses
    load = Load(arrival="offline", input_tokens=128, output_tokens=128, num_requests=8)
    p = ServingPlan(tp=16, pp=8, framework="vLLM 0.11")
    for sysm, want in ((dataclasses.replace(system("gb200-nvl72"), segment_gpus=0), [1, 1, 1, 2, 2, 1, 1]),
                       (system("gb200-nvl72"), [1, 1, 1, 2, 1, 1, 1])):
        scn = ServingScenario(system=sysm, model=model("llama3-70b"), plan=p, load=load, num_gpus=128)
        cost = ServingCost(resolve_limits(scn)[0], 8192)
        assert [cost._boundary_span(k).domains for k in range(7)] == want
        # a stage is tp·dp ranks (attention data parallelism of an MoE model): Mixtral tp 8 × dp 2, stride 16 too
        moe = ServingScenario(system=sysm, model=model("mixtral-8x7b"), load=load, num_gpus=128,
                              plan=ServingPlan(tp=8, dp=2, pp=8, framework="vLLM 0.11"))
        cost = ServingCost(resolve_limits(moe)[0], 8192)
        assert [cost._boundary_span(k).domains for k in range(7)] == want
