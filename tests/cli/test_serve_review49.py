"""From the forty-ninth session's independent review of serving: a concurrency cap over an open-loop load, vLLM's
KV pool, MFU of mixed iterations, and flags that were accepted and ignored. Each figure checked by hand."""
from __future__ import annotations

import json

import pytest

from narrowpath.cli.main import main
from narrowpath.catalog import model as catalog_model, system as catalog_system
from narrowpath.cost.serving_memory import serving_memory
from narrowpath.workload.serving import Formats
from narrowpath.spec.serving import ServingPlan

BASE = ["serve", "--model", "llama3-8b", "--system", "dgx-h100", "--no-whatif"]


def _json(capsys, argv) -> dict:
    assert main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def _find(doc, key):
    if isinstance(doc, dict):
        for k, v in doc.items():
            if k == key:
                return v
            found = _find(v, key)
            if found is not None:
                return found
    return None


def test_a_concurrency_cap_over_poisson_arrivals_never_sends_a_request_before_it_arrives(capsys):
    """At 1 request/s with ~1 s per request a cap of 64 never binds, so the run is the uncapped one. The closed loop
    re-timed every request beyond the first C to the moment an earlier one finished: 'concurrency 8' served 200
    Poisson requests in 51.9 s instead of 227 s, and under 64 request 64 (arriving at 65.6 s) was sent at 1.8 s and
    waited behind request 63 - TTFT p99 62.7 s on an idle GPU."""
    load = ["--input-len", "512", "--output-len", "256", "--num-requests", "200", "--rate", "1"]
    free = _json(capsys, [*BASE, *load])
    capped = _json(capsys, [*BASE, *load, "--concurrency", "64"])
    assert _find(capped, "makespan_s") == pytest.approx(_find(free, "makespan_s"), rel=1e-12)
    assert _find(free, "makespan_s") > 199  # the last Poisson arrival sets it, not the GPU
    one = _json(capsys, [*BASE, *load, "--concurrency", "1"])
    assert _find(one, "makespan_s") > _find(free, "makespan_s")  # one at a time falls behind the arrivals


def test_vllm_takes_its_kv_pool_as_a_share_of_the_whole_gpu():
    """vLLM's gpu_memory_utilization: KV = 0.9 x 85.9 GB - weights - activations - runtime (determine_available_memory),
    not 0.9 of what is free. Llama 3 70B at tp 2 on H100: 0.9 x 85.899 - 70.56 - 2.21 - 2.00 = 2.54 GB (the
    free-memory rule gives 10.0 GB, 3.9x the tokens)."""
    m, sysm = catalog_model("llama3-70b"), catalog_system("dgx-h100")
    plan = ServingPlan(tp=2)
    f = Formats.of(plan, True, m)
    kw = dict(max_num_tokens=16384, max_batch=1024, kv_fraction=0.9, block_tokens=16)
    free = serving_memory(m, plan, sysm, f, **kw)
    total = serving_memory(m, plan, sysm, f, fraction_of_total=True, **kw)
    used = free.weights_bytes + free.activation_bytes + free.runtime_bytes
    assert total.kv_pool_bytes == pytest.approx(0.9 * free.capacity_bytes - used, rel=1e-12)
    assert free.kv_pool_bytes == pytest.approx(0.9 * (free.capacity_bytes - used), rel=1e-12)
    assert 2.4e9 < total.kv_pool_bytes < 2.7e9 < 9.9e9 < free.kv_pool_bytes


def test_the_vllm_stacks_size_the_pool_of_the_whole_gpu_and_tensorrt_llm_of_the_free_memory(capsys):
    argv = ["--model", "llama3-70b", "--tp", "2", "--offline", "--num-requests", "8", "--input-len", "1024",
            "--output-len", "8"]
    for fw, whole in (("vLLM 0.11", True), ("vLLM 0.6.3", True), ("TensorRT-LLM 1.0", False)):
        doc = _json(capsys, ["serve", "--system", "dgx-h100", "--no-whatif", *argv, "--framework", fw])
        cap, pool = _find(doc, "capacity_bytes"), _find(doc, "kv_pool_bytes")
        used = _find(doc, "weights_bytes") + _find(doc, "activation_bytes") + _find(doc, "runtime_bytes")
        assert pool == pytest.approx(0.9 * cap - used if whole else 0.9 * (cap - used), rel=1e-9), fw


def test_mfu_counts_a_prompt_tokens_attention_over_the_prompt_not_the_decodes_context(capsys):
    """One 32,768-token prompt and 2 output tokens of Llama 3 8B on one H100: linear 32,770 x 15.01 GFLOP = 4.92e14,
    causal attention 4 x 32 layers x 4,096 x 32,768^2 / 2 = 2.81e14 over the end-to-end time: MFU 50.2 % (it read
    68.5 %: every prompt token charged the decode's 32k context)."""
    doc = _json(capsys, [*BASE, "--input-len", "32768", "--output-len", "2", "--batch", "1"])
    linear = 2 * (8.03e9 - 128256 * 4096)
    flop_tok = _find(doc, "useful_flop_per_token")
    attn = 4 * 32 * 4096 * 32768 ** 2 / 2
    assert flop_tok == pytest.approx((32770 * linear + attn + 4 * 32 * 4096 * 32769) / 32770, rel=0.01)
    assert _find(doc, "mfu") == pytest.approx(0.502, abs=0.01)


@pytest.mark.parametrize("argv, flag", [
    (["--gpus", "8", "--tp", "2", "--replicas", "2", "--offline"], "--gpus"),
    (["--batch", "8", "--concurrency", "4"], "--concurrency"),
    (["--offline", "--policy", "static", "--concurrency", "4"], "--concurrency"),
    (["--batch", "8", "--policy", "decode-first"], "--batch"),
])
def test_a_serving_flag_that_would_be_ignored_is_refused(capsys, argv, flag):
    assert main([*BASE, "--input-len", "128", "--output-len", "16", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(f"narrowpath: error: {flag}:"), err


@pytest.mark.parametrize("extra", [["--rate", "50"], ["--offline"], ["--batch", "16"], ["--num-requests", "10"]])
def test_a_trace_refuses_the_flags_it_would_ignore(capsys, tmp_path, extra):
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,input_tokens,output_tokens\n0,128,16\n0.5,64,8\n")
    assert main([*BASE, "--requests", str(trace), *extra]) == 2
    err = capsys.readouterr().err
    assert "--requests: a trace sets each request's arrival" in err and extra[0] in err


def test_a_trace_under_a_concurrency_cap_keeps_its_arrivals(capsys, tmp_path):
    """Four requests a minute apart under a cap of 1: each is sent when it arrives (the GPU is idle by then), so the
    run spans the trace's 180 s, not four back-to-back requests."""
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,input_tokens,output_tokens\n" + "".join(f"{60 * i},128,16\n" for i in range(4)))
    doc = _json(capsys, [*BASE, "--requests", str(trace), "--concurrency", "1"])
    assert 180 < _find(doc, "makespan_s") < 181


@pytest.mark.parametrize("argv, flag", [
    (["--serve", "--slo-ttft", "1", "--slo-tpot", "0.05", "--input-len", "512", "--output-len", "128",
      "--objective", "energy"], "--objective"),
    (["--serve", "--slo-ttft", "1", "--slo-tpot", "0.05", "--input-len", "512", "--output-len", "128",
      "--gbs", "32"], "--gbs"),
    (["--gbs", "64", "--slo-ttft", "1"], "--slo-ttft"),
    (["--gbs", "64", "--input-len", "512"], "--input-len"),
])
def test_search_refuses_the_other_searchs_flags(capsys, argv, flag):
    """`search --serve` ignored --objective, --min-free-gb, --gbs, --zero...; a training search took --slo-ttft."""
    assert main(["search", "--model", "llama3-8b", "--system", "dgx-h100", "--gpus", "8", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(f"narrowpath: error: {flag}:"), err
