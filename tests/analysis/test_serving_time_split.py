"""Where a serving iteration's time goes beyond its GPU work: `ServingCost.iteration_parts` takes an iteration apart
(graph padding, a static session's serial launch, the executor's host work, an eager dispatch) and the accounts'
time split prices the run's prompt-carrying and decode-only iterations apart (`iteration_split`). Values by hand
from the cost model's rules: each part is the iteration's time with one more mechanism switched on."""
from __future__ import annotations

import dataclasses

import pytest

from narrowpath.analysis.serving_accounts import (DISPATCH_KEY, HOST_KEY, LAUNCH_KEY, PAD_KEY, iteration_kinds,
                                                  serving_accounts)
from narrowpath.analysis.serving_whatif import HOST_REMEDY
from narrowpath.catalog import model, system
from narrowpath.schedule.serving_cost import ServingCost
from narrowpath.schedule.serving_run import simulate
from narrowpath.spec.serving import Load, ServingPlan, ServingScenario

TRTLLM = "TensorRT-LLM 1.0 (PyTorch backend)"


def _scn(framework: str, sysname: str = "dgx-h100", gpus: int = 1, load: Load | None = None, **plan):
    p = ServingPlan(framework=framework, **plan)
    return ServingScenario(system=system(sysname), model=model("llama3-8b"), plan=p, num_gpus=gpus,
                           load=load or Load(arrival="offline", input_tokens=128, output_tokens=256,
                                             num_requests=200))


def _cost(framework: str, **plan) -> ServingCost:
    plan = {"weight_precision": "fp8", "kv_precision": "fp8", "max_batch": 512, "max_num_tokens": 2048} | plan
    return ServingCost(_scn(framework, gpus=plan.get("pp", 1), **plan), 2048)


CASES = [  # (framework, plan, iteration arguments)
    (TRTLLM, {}, (40.0, 40.0, 40_000.0)),  # a decode batch padded 40 -> 64
    (TRTLLM, {}, (1500.0, 1000.0, 1e6, 500.0, 125_250.0, 500.0, 1001.0)),  # an eager prompt iteration
    (TRTLLM, {"max_batch": 2048}, (600.0, 600.0, 6e5)),  # 600 decodes pad to the 1024 graph
    (TRTLLM, {"max_batch": 2048, "graph_padding": False}, (600.0, 600.0, 6e5)),  # no graph of 600: eager
    (TRTLLM, {"pp": 2}, (1500.0, 1000.0, 1e6, 500.0, 125_250.0, 500.0, 1001.0)),  # eager floors, serial loop
    (TRTLLM, {"pp": 2}, (64.0, 64.0, 64_000.0)),  # a serial pipeline loop (pp_host_serial)
    ("TensorRT-LLM 0.7", {"max_batch": 8}, (8.0, 8.0, 8_000.0)),  # a static session's serial launch
    ("vllm", {}, (300.0, 300.0, 3e5)),  # no host model, no graphs: all GPU
]


@pytest.mark.parametrize("framework, plan, args", CASES)
def test_the_parts_sum_to_the_iteration_and_none_is_negative(framework, plan, args):
    cost = _cost(framework, **plan)
    parts = cost.iteration_parts(*args)
    assert set(parts) == {"gpu", "padding", "launch", "host", "dispatch"}
    assert sum(parts.values()) == pytest.approx(cost.iteration_s(*args), rel=1e-12)
    assert min(parts.values()) >= -1e-15 and parts["gpu"] > 0
    if framework == TRTLLM and plan.get("graph_padding") is False:  # no graph: the host's thread issues every kernel
        thread = 600 * 29e-6 + cost.stage_kernels[0] * cost.cal.host_dispatch_s
        assert parts["padding"] == 0.0 and parts["launch"] == 0.0
        assert parts["host"] + parts["dispatch"] == pytest.approx(max(0.0, thread - parts["gpu"]), abs=1e-12)
        assert cost.decode_graph(600) is None and cost.decode_graph(512) == 512


def _window_model(every: int):
    return dataclasses.replace(model("llama3-8b"), sliding_window=256, sliding_window_every=every)


@pytest.mark.parametrize("framework, pp, every", [(TRTLLM, 1, 0), (TRTLLM, 2, 2), ("TensorRT-LLM 0.7", 2, 0),
                                                  ("vllm", 4, 3), ("TensorRT-LLM 0.7", 1, 2)])
def test_a_context_line_prices_as_the_iteration_does(framework, pp, every):
    """context_line(...)(ctx) is iteration_s at that context, bit for bit, over decode-only and prompt iterations of
    random sizes (pipeline stages, eager prompts, a static session's launch, sliding windows)."""
    import random
    m = _window_model(every) if every else model("llama3-8b")
    scn = dataclasses.replace(_scn(framework, gpus=pp, pp=pp, weight_precision="fp8", kv_precision="fp8",
                                   max_batch=512, max_num_tokens=2048), model=m)
    cost = ServingCost(scn, 2048)
    rng = random.Random(7)
    for _ in range(60):
        d = rng.choice([0, 1, 3, 40, 64, 300, 511])
        P = rng.choice([0, 0, 17, 900]) if d else rng.choice([17, 900])
        ctx, pairs = d * rng.uniform(100, 3000), P * (P + 1) / 2
        args = (d + P, d, ctx, P, pairs, P + 1.0, d + (1 if P else 0), 1.0)
        line = cost.context_line(d + P, d, P, d + (1 if P else 0), 1.0)
        assert line(ctx, pairs, P + 1.0) == cost.iteration_s(*args)


def test_each_part_is_what_its_mechanism_adds():
    """Padding: 40 decodes on trtllm-bench's sizes run as 64 (24 dummies of one context token each): the GPU time of
    64 decodes over 40,024 context tokens less that of 40 over 40,000. Launch: TensorRT-LLM 0.7's static session
    adds the stage's kernels × host_dispatch_s. Host: 1,000 decodes of trtllm-bench's 29 us each (29 ms) outlast
    their GPU work; the excess is 29 ms less the GPU period. An eager prompt iteration: the host's thread then issues
    every kernel on top of the bookkeeping."""
    cost = _cost(TRTLLM)
    parts = cost.iteration_parts(40.0, 40.0, 40_000.0)
    bare = cost.context_line(64.0, 64.0, pad=False, launch=False, host=False, eager=False)(40_024.0)
    assert parts["padding"] == pytest.approx(bare - parts["gpu"], rel=1e-12) and parts["padding"] > 0
    assert parts["gpu"] == pytest.approx(
        cost.context_line(40.0, 40.0, pad=False, launch=False, host=False, eager=False)(40_000.0), rel=1e-12)
    static = _cost("TensorRT-LLM 0.7", max_batch=8)
    assert static.iteration_parts(8.0, 8.0, 8_000.0)["launch"] == pytest.approx(
        static.stage_kernels[0] * static.cal.host_dispatch_s, rel=1e-12)
    big = _cost(TRTLLM, max_batch=1024, graph_batch_sizes=(1024,))
    p = big.iteration_parts(1024.0, 1024.0, 1024 * 200.0)
    assert big.host_per_request_s == pytest.approx(29e-6)
    host = 1024 * 29e-6
    assert host > p["gpu"] + p["padding"]
    assert p["host"] == pytest.approx(host - p["gpu"] - p["padding"], rel=1e-9) and p["dispatch"] == 0.0
    q = big.iteration_parts(1524.0, 1024.0, 1024 * 200.0, 500.0, 125_250.0, 500.0, 1025.0)
    gpu, bookkeeping = q["gpu"] + q["padding"], 1025 * 29e-6
    thread = bookkeeping + big.stage_kernels[0] * big.cal.host_dispatch_s  # one thread: bookkeeping, then issue
    assert q["host"] == pytest.approx(max(0.0, bookkeeping - gpu), rel=1e-9, abs=1e-12)
    assert q["host"] + q["dispatch"] == pytest.approx(max(0.0, thread - gpu), rel=1e-9, abs=1e-12)
    assert q["dispatch"] > 0


def test_the_totals_tell_prompt_iterations_from_decode_only_ones():
    """A logged lane's iterations with prompt tokens are the totals' prompt_iterations; the decodes they carry and
    the padded batches of the decode-only ones are counted apart (no graph list: padded = real)."""
    for framework in (TRTLLM, "vllm"):
        run = simulate(_scn(framework, weight_precision="fp8", kv_precision="fp8"))
        t, log = run.result.totals, run.result.log
        assert t.prompt_iterations == sum(r.steps for r in log if r.prompt_tokens > 0)
        assert t.prompt_iteration_decodes == sum(r.steps * r.decodes for r in log if r.prompt_tokens > 0)
        graphs = [(r.steps, r.decodes, run.cost.decode_graph(r.decodes)) for r in log if r.prompt_tokens == 0]
        assert t.padded_decodes == sum(n * g for n, _, g in graphs if g is not None)
        assert t.eager_iterations == sum(n for n, _, g in graphs if g is None)
        if framework == "vllm":  # not held to graph sizes: every decode batch at its own size
            assert t.padded_decodes == sum(n * d for n, d, _ in graphs) and not t.eager_iterations
        assert t.prompt_iteration_done == len(run.result.input_tokens)  # each prompt finishes once (no preemption)
        kinds = iteration_kinds(run)
        assert sum(k.count for k in kinds) == t.iterations
        assert sum(k.count * k.prompt_tokens for k in kinds) == pytest.approx(t.prompt_tokens)


def test_a_static_session_is_bound_by_its_serial_launch():
    """Llama-3 8B bf16 on 8 H100 at tp 8, batch 1, under NeMo's TensorRT-LLM 0.x session: each step's ~3 ms of GPU
    work (64 small all-reduces, weight reads of 2 GB a GPU) is followed by the host enqueuing its kernels one by one
    (10 us each), which the split names first; the verdict says what removes it."""
    run = simulate(_scn("NeMo Framework inference", gpus=8, tp=8,
                        load=Load(arrival="fixed-batch", batch_size=1, input_tokens=128, output_tokens=20,
                                  num_requests=4)))
    acc = serving_accounts(run)
    assert max(acc.time_split, key=acc.time_split.get) == LAUNCH_KEY
    assert sum(acc.time_split.values()) == pytest.approx(1.0)
    launch = run.cost.stage_kernels[0] * run.cost.cal.host_dispatch_s
    decode_only = [k for k in iteration_kinds(run) if not k.prompt_tokens]
    assert decode_only and launch / run.cost.iteration_s(1.0, 1.0, decode_only[0].decode_ctx) > 0.3
    assert "CUDA graphs" in HOST_REMEDY[LAUNCH_KEY]
    share = acc.gpu_busy_share  # the GPU idles while the host launches: its work over work + launch
    k = [k for k in iteration_kinds(run) if not k.prompt_tokens][0]
    parts = run.cost.iteration_parts(1.0, 1.0, k.decode_ctx)
    assert share < 0.8 and parts["gpu"] / sum(parts.values()) == pytest.approx(share, rel=0.1)


def test_a_host_bound_iteration_is_the_hosts_and_padding_shows():
    """Llama-3 8B FP8 on one B200 under trtllm-bench, 128/1024 offline: ~1,400 decodes an iteration need ~41 ms of
    host work against ~25 ms of GPU work, in the prompt iterations too, so the host rows take it all (bookkeeping,
    and the eager dispatch of the prompt iterations). On one H100 at 128/2048 the KV cache holds ~469 sequences,
    padded to the 512 graph: the GPU bounds and the padding shows as a row of its own; without padding it does not."""
    run = simulate(_scn(TRTLLM, "dgx-b200", weight_precision="fp8", kv_precision="fp8",
                        load=Load(arrival="offline", input_tokens=128, output_tokens=1024, num_requests=3000)))
    split = serving_accounts(run).time_split
    assert set(split) == {HOST_KEY, DISPATCH_KEY} and split[HOST_KEY] > 0.9
    acc = serving_accounts(run)  # the GPU works ~25 of ~41 ms: well below the whole, well above nothing
    assert 0.4 < acc.gpu_busy_share < 0.9
    load = Load(arrival="offline", input_tokens=128, output_tokens=2048, num_requests=1500)
    h100 = serving_accounts(simulate(_scn(TRTLLM, weight_precision="fp8", kv_precision="fp8", load=load))).time_split
    assert PAD_KEY in h100 and 0.01 < h100[PAD_KEY] < 0.2 and HOST_KEY not in h100
    assert serving_accounts(simulate(_scn(TRTLLM, weight_precision="fp8", kv_precision="fp8",
                                          load=load))).gpu_busy_share == pytest.approx(1.0)
    unpadded = _scn(TRTLLM, weight_precision="fp8", kv_precision="fp8", load=load, graph_padding=False)
    assert PAD_KEY not in serving_accounts(simulate(dataclasses.replace(unpadded))).time_split


def test_the_json_and_the_console_carry_the_split_and_the_gpu_share(capsys):
    """`serve --json` carries the host rows and gpu_busy_share; the console says how long the GPU works."""
    import json

    from narrowpath.cli.main import main
    args = ["serve", "--model", "llama3-8b", "--system", "dgx-h100", "--gpus", "8", "--tp", "8", "--batch", "1",
            "--input-len", "128", "--output-len", "20", "--num-requests", "4", "--framework", "NeMo", "--no-whatif"]
    assert main(args + ["--json"]) == 0
    acc = json.loads(capsys.readouterr().out)["accounts"]
    assert max(acc["time_split"], key=acc["time_split"].get) == LAUNCH_KEY and 0 < acc["gpu_busy_share"] < 1
    assert main(args) == 0
    assert f"the GPU works {acc['gpu_busy_share']:.0%} of it" in capsys.readouterr().out


def test_a_static_session_replaying_captured_graphs_launches_once_a_step():
    """TensorRT-LLM 0.x's GptSession with CUDA graphs on (gptSessionBenchmark --enable_cuda_graph) still waits for
    each step, then launches its captured generation graph: one launch (host_dispatch_s) instead of every kernel; a
    prompt step (never captured) and a decode batch no graph fits still launch kernel by kernel."""
    graphs = _cost("TensorRT-LLM 0.7", max_batch=8, graph_batch_sizes=(8,))
    plain = _cost("TensorRT-LLM 0.7", max_batch=8)
    one = graphs.cal.host_dispatch_s
    assert graphs.iteration_parts(8.0, 8.0, 8_000.0)["launch"] == pytest.approx(one, rel=1e-12)
    assert plain.iteration_parts(8.0, 8.0, 8_000.0)["launch"] == pytest.approx(plain.stage_kernels[0] * one)
    prompt = (1024.0, 0.0, 0.0, 1024.0, 1024 * 1025 / 2, 1024.0, 8.0)
    assert graphs.iteration_parts(*prompt)["launch"] == pytest.approx(graphs.stage_kernels[0] * one, rel=1e-12)
    assert graphs.iteration_parts(4.0, 4.0, 4_000.0)["launch"] == pytest.approx(graphs.stage_kernels[0] * one)
    assert graphs.iteration_s(8.0, 8.0, 8_000.0) == pytest.approx(
        plain.iteration_s(8.0, 8.0, 8_000.0) - (plain.stage_kernels[0] - 1) * one, rel=1e-12)


def test_the_cuda_graphs_whatif_is_offered_to_a_static_session_only():
    """NeMo's static session at batch 1 (the launch 40 % of a step): the what-if replays its decode steps as graphs
    and gains; trtllm-bench's in-flight executor and a static session already on graphs are told why not."""
    from narrowpath.analysis.serving_whatif import candidates
    scn = _scn("NeMo Framework inference", gpus=8, tp=8, max_batch=1,
               load=Load(arrival="fixed-batch", batch_size=1, input_tokens=128, output_tokens=20, num_requests=4))
    out, skipped = candidates(scn, False, 1, "static")
    alt = {name: s for name, _, s in out}["CUDA graphs"]
    assert alt.plan.graph_batch_sizes == (1,) and alt.plan.graph_padding is False
    base, faster = simulate(scn).result, simulate(alt).result
    assert faster.output_tokens_per_s > 1.3 * base.output_tokens_per_s
    for other in (_scn(TRTLLM), dataclasses.replace(scn, plan=dataclasses.replace(scn.plan, graph_batch_sizes=(1,)))):
        reasons = dict(candidates(other, False, 1)[1])
        assert "CUDA graphs" in reasons


@pytest.mark.parametrize("name", ["replicas", "attention dp", "disaggregated", "static padded", "spec"])
def test_the_kinds_add_up_on_every_path(name):
    """Whatever the path that counts iterations — several lanes, an attention-DP lockstep group, prefill-only and
    decode-only lanes, a static batch on captured graphs, speculative decoding — the kinds' counts are the run's
    iterations, a prompt iteration's finished prompts are the requests over the prompt iterations, the split's rows
    are non-negative and, where the GPU bounds, add up to the kind's iteration within the grid interpolation."""
    from narrowpath.analysis.serving_accounts import kind_split
    poisson = Load(arrival="poisson", rate_per_s=30, input_tokens=300, output_tokens=200, num_requests=240)
    scn = {"replicas": lambda: _scn(TRTLLM, gpus=4, replicas=4, load=poisson),
           "attention dp": lambda: ServingScenario(system=system("dgx-h100"), model=model("mixtral-8x7b"),
                                                   plan=ServingPlan(framework=TRTLLM, dp=8, ep=8), num_gpus=8,
                                                   load=poisson),
           "disaggregated": lambda: _scn(TRTLLM, gpus=2, replicas=2, prefill_replicas=1, load=poisson),
           "static padded": lambda: _scn("TensorRT-LLM 0.7", graph_batch_sizes=(1, 4), graph_padding=True,
                                         load=Load(arrival="fixed-batch", batch_size=3, input_tokens=128,
                                                   output_tokens=64, num_requests=5)),
           "spec": lambda: _scn(TRTLLM, load=poisson, spec_tokens=3, spec_acceptance=0.7)}[name]()
    run = simulate(scn)
    t, kinds = run.result.totals, iteration_kinds(run)
    assert sum(k.count for k in kinds) == t.iterations
    prompt = [k for k in kinds if k.prompt_tokens]
    assert len(prompt) == 1 and prompt[0].rows - prompt[0].decodes == pytest.approx(
        len(run.result.input_tokens) / prompt[0].count)
    if name == "static padded":  # sizes (1, 4) under a batch limit of 3 capture 1 and 3: the last batch of 2 pads
        graphed = [k for k in kinds if k.graph]  # to 3, so every decode step runs at 3
        assert run.cost.graph_sizes == [1, 3] and graphed[0].padded_decodes == 3.0 and graphed[0].decodes == 2.5
    for k in kinds:
        rows, busy, whole = kind_split(run, k)
        assert min(rows.values()) >= 0 and 0 < busy <= whole * (1 + 1e-12)
        if HOST_KEY not in rows and DISPATCH_KEY not in rows:
            assert sum(rows.values()) == pytest.approx(whole, rel=0.03)
    if name == "spec":
        from narrowpath.analysis.serving_accounts import DRAFT_KEY
        assert serving_accounts(run).time_split.get(DRAFT_KEY, 0.0) > 0


def test_per_token_figures_are_per_gpu_whatever_the_replicas():
    """Four replicas of the same deployment move the same bytes per generated token on each GPU as one replica does
    (the totals sum over every lane's iterations); so do the collectives per token."""
    load = Load(arrival="offline", input_tokens=256, output_tokens=128, num_requests=200)
    one = serving_accounts(simulate(_scn("vllm", gpus=2, tp=2, load=load)))
    four = serving_accounts(simulate(_scn("vllm", gpus=8, tp=2, replicas=4,
                                          load=dataclasses.replace(load, num_requests=800))))
    hbm = {r.level: r.bytes_per_token for r in one.levels}["hbm"]
    assert {r.level: r.bytes_per_token for r in four.levels}["hbm"] == pytest.approx(hbm, rel=0.02)
    assert four.mean.output_tokens == pytest.approx(one.mean.output_tokens, rel=0.02)
    assert sum(c.per_token for c in four.collectives) == pytest.approx(sum(c.per_token for c in one.collectives),
                                                                        rel=0.02)


def _pp1_parts_by_hand(cost: ServingCost, T, d, ctx, P=0.0, pairs=0.0, pctx=0.0, rows=None, pad=0):
    """The parts of a pp-1 iteration from the cost model's public pieces (token grid, attention, output layer,
    launch, bookkeeping, dispatch), in the order iteration_parts switches them on."""
    rows = d if rows is None else rows
    gpu = cost.token_time_s(0, T) + cost.attention_s(0, d, ctx, P, pairs, pctx) + cost.head_time_s(rows)
    padded = (cost.token_time_s(0, T + pad) + cost.attention_s(0, d + pad, ctx + pad, P, pairs, pctx)
              + cost.head_time_s(rows + pad)) if pad else gpu
    bookkeeping = cost.host_per_request_s * max(d, rows)
    if cost.launch_s is not None:  # a static session: serial, additive
        return {"gpu": gpu, "padding": padded - gpu, "launch": cost.launch_s[0], "host": bookkeeping, "dispatch": 0.0}
    issue = cost.stage_kernels[0] * cost.cal.host_dispatch_s if P and cost.eager_prefill else 0.0
    return {"gpu": gpu, "padding": padded - gpu, "launch": 0.0, "host": max(0.0, bookkeeping - padded),
            "dispatch": max(padded, bookkeeping + issue) - max(padded, bookkeeping)}


@pytest.mark.parametrize("framework, plan, args, pad", [
    (TRTLLM, {}, (40.0, 40.0, 40_000.0), 24),  # padded 40 -> 64, GPU-bound
    (TRTLLM, {}, (1017.0, 1000.0, 150_000.0, 17.0, 153.0, 17.0, 1001.0), 0),  # eager prompt: bookkeeping + issue
    (TRTLLM, {"max_batch": 1024, "graph_batch_sizes": (1024,)}, (1024.0, 1024.0, 204_800.0), 0),  # host-bound
    ("TensorRT-LLM 0.7", {"max_batch": 8}, (8.0, 8.0, 8_000.0), 0),  # a static session's launch
    ("vllm", {}, (64.0, 64.0, 64_000.0, 0.0, 0.0, 0.0, 64.0), 0)])
def test_the_parts_match_the_cost_models_pieces(framework, plan, args, pad):
    cost = _cost(framework, **plan)
    parts = cost.iteration_parts(*args)
    T, d, ctx = args[:3]
    rest = args[3:7] if len(args) > 3 else ()
    expect = _pp1_parts_by_hand(cost, T, d, ctx, *rest, pad=pad)
    for k, v in expect.items():
        assert parts[k] == pytest.approx(v, rel=1e-9, abs=1e-12), k
    if args[3:4] == (17.0,):
        assert parts["dispatch"] > 0  # the case exercises an issue beyond the GPU


def test_a_chunk_over_a_long_context_reads_it():
    """A 16-token prompt chunk over 100,000 tokens of earlier context reads that context's K/V: the prefill core is
    memory-bound, so iteration_s and its context line both see pre_ctx."""
    cost = _cost("vllm")
    far = cost.iteration_s(16.0, 0.0, 0.0, 16.0, 16 * 100_000.0, 100_016.0, 1.0)
    near = cost.iteration_s(16.0, 0.0, 0.0, 16.0, 16 * 100_000.0, 16.0, 1.0)
    assert far > near
    assert cost.context_line(16.0, 0.0, 16.0, 1.0)(0.0, 16 * 100_000.0, 100_016.0) == far


def test_a_speculative_decode_line_prices_its_padded_draft():
    """Under speculative decoding a lane's run of decode steps (decode_line) is the iteration the lane would price
    one step at a time, draft passes on the padded batch included."""
    from narrowpath.schedule.serving_run import step_pricer
    cost = _cost(TRTLLM, spec_tokens=3, spec_acceptance=0.7)
    step = step_pricer(cost, 1, 3)
    for d in (40.0, 64.0, 300.0):
        line = step.decode_line(d * 4, d, d, 4)
        assert line(d * 900.0) == step(d * 4, d, d * 900.0, 0, 0, 0, d, 4)
        assert step.draft_s(d, 0) > 0 and line(d * 900.0) > cost.iteration_s(d * 4, d, d * 900.0, queries_per_seq=4)


def test_the_lanes_count_chunks_contexts_and_eager_static_steps():
    """Whole prompts (trtllm-bench: no chunking) are one chunk each; the decodes a prompt iteration carries hold at
    least their prompt and first token each; a static batch no graph fits (sizes (1, 4) without padding, batches of
    3 and 2) decodes eagerly throughout, so its eager totals are all its decode totals."""
    run = simulate(_scn(TRTLLM, weight_precision="fp8", kv_precision="fp8"))
    t = run.result.totals
    assert t.prompt_iteration_chunks == len(run.result.input_tokens)
    assert t.prompt_iteration_decode_ctx >= t.prompt_iteration_decodes * 129 > 0
    static = simulate(_scn("TensorRT-LLM 0.7", graph_batch_sizes=(1, 4), graph_padding=False,
                           load=Load(arrival="fixed-batch", batch_size=3, input_tokens=128, output_tokens=64,
                                     num_requests=5))).result.totals
    assert static.eager_iterations == 2 * 63 and static.eager_decodes == static.decode_tokens
    assert static.eager_decode_ctx == static.decode_ctx_tokens and static.padded_decodes == 0
    assert static.prompt_iteration_chunks == static.prompt_iteration_done == 5


def test_a_graphed_run_without_padding_shows_no_eager_dispatch():
    """trtllm-serve (graphs 1-31, 32, 64, 128, no padding) serving a light Poisson load: every decode batch has a
    graph, so however fractional the mean batch, the split has no eager row (the review's repro)."""
    run = simulate(_scn("trtllm-serve", "dgx-b200", load=Load(arrival="poisson", rate_per_s=4, input_tokens=128,
                                                               output_tokens=512, num_requests=200)))
    assert run.result.totals.eager_iterations == 0
    split = serving_accounts(run).time_split
    assert DISPATCH_KEY not in split and HOST_KEY not in split


def test_attention_dp_ranks_wait_for_their_groups_slowest_and_the_split_says_so():
    """Mixtral on 8 H200 as 8 attention-DP ranks over 8-way expert parallelism, Poisson arrivals: every MoE layer
    synchronises the ranks (schedule.serving_sim.LaneGroup), so an iteration lasts as long as the slowest rank's.
    Priced at each rank's own mean sizes the iterations came to about three quarters of their simulated time (the
    rest booked nowhere, then spread over the other rows by the shares); the split now books it as the wait for the
    slowest rank, so its rows add up to the simulated mean iteration, and the GPU-busy share excludes it. One
    tensor-parallel instance has no such row."""
    from narrowpath.analysis.serving_accounts import LOCKSTEP_KEY, iteration_split, lockstep_wait_s
    load = Load(arrival="poisson", rate_per_s=30, input_tokens=300, output_tokens=200, num_requests=240)

    def run_of(**plan):
        p = ServingPlan(chunked_prefill=True, max_num_tokens=8192, **plan)
        return simulate(ServingScenario(system=system("dgx-h200"), model=model("mixtral-8x7b"), plan=p, load=load,
                                        num_gpus=p.num_gpus))
    dp = run_of(tp=1, dp=8, ep=8)
    split, busy = iteration_split(dp)
    t = dp.result.totals
    measured = t.busy_s / t.iterations
    assert split[LOCKSTEP_KEY] > 0.15 * measured
    assert sum(split.values()) == pytest.approx(measured, rel=0.01)
    assert busy < 1 - split[LOCKSTEP_KEY] / measured + 0.01
    assert LOCKSTEP_KEY in serving_accounts(dp).time_split and LOCKSTEP_KEY in HOST_REMEDY
    tp = run_of(tp=8)
    assert lockstep_wait_s(tp, 0.0) == 0.0 and LOCKSTEP_KEY not in iteration_split(tp)[0]
