"""From the forty-ninth session's reviews, held where the mutation tool's pool reaches (tests/cost): nccl-tests'
bus-bandwidth factor of every test binary, and vLLM's KV pool refusal naming what the GPU holds."""
from __future__ import annotations

import re

import pytest

from narrowpath.catalog import model, system
from narrowpath.cost.collectives import bus_factor
from narrowpath.cost.serving_memory import serving_memory
from narrowpath.errors import InfeasibleError
from narrowpath.spec.serving import ServingPlan
from narrowpath.workload.serving import Formats


@pytest.mark.parametrize("op, factor", [
    ("all_reduce", 2 * 7 / 8), ("all_gather", 7 / 8), ("reduce_scatter", 7 / 8), ("all_to_all", 7 / 8),
    ("gather", 7 / 8), ("scatter", 7 / 8), ("hypercube", 7 / 8), ("broadcast", 1.0), ("reduce", 1.0),
    ("send_recv", 1.0)])
def test_bus_factor_of_every_nccl_test_at_8_ranks(op, factor):
    """nccl-tests src/*.cu *GetBw: AllReduce 2(n−1)/n; AllGather, ReduceScatter, AlltoAll, Gather, Scatter (n−1)/n;
    HyperCube's algBw is already (n−1)/n of size/time and its busBw = algBw, so against size/time (n−1)/n;
    Broadcast, Reduce, SendRecv 1. Gather, scatter and hypercube read 1 until the forty-ninth session: a gather
    log's busbw came out 8/7 of the log's own column."""
    assert bus_factor(op, 8) == pytest.approx(factor, rel=1e-12)
    assert bus_factor(op, 1) == 0.0


def test_a_vllm_pool_the_weights_leave_nothing_of_is_refused_with_what_the_gpu_holds():
    """Llama 3 70B in bf16 on one H100 (80 GB): 141 GB of weights alone exceed 0.9 of the 85.9 GB the stack may use.
    The message gives the GB held (weights, workspace, runtime) and the share, each in GB, not bytes."""
    m, h100 = model("llama3-70b"), system("dgx-h100")
    plan = ServingPlan(tp=1)
    f = Formats.of(plan, True, m)
    with pytest.raises(InfeasibleError) as exc:
        serving_memory(m, plan, h100, f, max_num_tokens=2048, max_batch=64, kv_fraction=0.9, block_tokens=16,
                       fraction_of_total=True)
    text = str(exc.value)
    assert "does not fit for serving" in text
    # the free-memory rule refuses it too (its weights alone exceed the card), with the stage's own figures
    held = re.search(r"needs ([0-9.]+) GB", text)
    assert held and 100 < float(held.group(1)) < 200, text


def test_vllms_pool_is_refused_in_gb_once_the_share_is_used_up():
    """Llama 3 70B FP8 weights (70.6 GB) at tp 1 on an H100 with a 16,384-token workspace: they fit the card (85.9
    GB) but not vLLM's 0.9 of it (77.3 GB) beside the workspace and the 2 GB runtime: refused by the share, naming
    the GB held (between 77.3 and 85.9) and the card's 85.9 GB."""
    m, h100 = model("llama3-70b"), system("dgx-h100")
    plan = ServingPlan(tp=1, weight_precision="fp8")
    f = Formats.of(plan, True, m)
    kw = dict(max_num_tokens=16384, max_batch=256, kv_fraction=0.9, block_tokens=16)
    free = serving_memory(m, plan, h100, f, **kw)  # the free-memory rule leaves a pool
    used = free.weights_bytes + free.activation_bytes + free.runtime_bytes
    assert 0.9 * free.capacity_bytes < used < free.capacity_bytes
    with pytest.raises(InfeasibleError) as exc:
        serving_memory(m, plan, h100, f, fraction_of_total=True, **kw)
    text = str(exc.value)
    assert f"needs {used / 1e9:.1f} GB of weights, activations and runtime" in text
    assert f"more than the 0.9 of the {free.capacity_bytes / 1e9:.1f} GB of one H100" in text
