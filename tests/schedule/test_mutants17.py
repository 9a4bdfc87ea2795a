"""Values the seed-17 mutation sample (benchmarks/mutation.py) found unguarded in schedule/ — a stack's defaults by
training format, the layout choice's request cap, trtllm-bench's batch rounding above 1,024, a stack's tp default,
the host bookkeeping of an overlapped pipeline loop, the draft passes of a run of decode steps, static batching of
a sliding-window model, a lane's whole KV blocks, the refusal of a request no lane holds, a disaggregated log's
decode role, the KV block-seconds of a lane's log, and the smallest deployment and cost grid of a disaggregated
steady state — each pinned by a hand calculation or by two paths that must agree."""
from __future__ import annotations

import dataclasses
import re
from types import SimpleNamespace

import pytest

from narrowpath.catalog import model, system
from narrowpath.errors import SpecError
from narrowpath.schedule import serving_cost, serving_defaults, serving_run, serving_steady
from narrowpath.schedule.choose import resolve_open_knobs
from narrowpath.schedule.serving_choose import choose_layout
from narrowpath.schedule.serving_cost import ServingCost
from narrowpath.schedule.serving_defaults import (resolve_formats, resolve_layout_defaults, resolve_limits,
                                                  trtllm_bench_limits)
from narrowpath.schedule.serving_run import check_fits, simulate, step_pricer
from narrowpath.schedule.serving_steady import steady_lane
from narrowpath.spec import Plan, Scenario
from narrowpath.spec.serving import Load, ServingPlan, ServingScenario

H100 = system("dgx-h100")
LOAD = Load(arrival="offline", input_tokens=256, output_tokens=64, num_requests=32)


def _scn(plan: ServingPlan = ServingPlan(), load: Load = LOAD, mdl="llama3-8b", gpus: int | None = None
         ) -> ServingScenario:
    m = model(mdl) if isinstance(mdl, str) else mdl
    return ServingScenario(system=H100, model=m, plan=plan, load=load, num_gpus=gpus or plan.num_gpus)


# ---- training: the stack's defaults for the run's format -----------------------------------------------------

def test_an_open_knob_takes_the_stacks_default_for_the_runs_training_format():
    """Megatron-Bridge sets grad_precision only per training format (stacks.yaml defaults_by_precision: fp8 →
    bf16 gradients); its plain `defaults` do not name it, and no search candidate exists for it. An FP8 run that
    leaves grad_precision out therefore takes bf16 from the fp8 entry, noted as the stack's default — read
    without the run's format, the knob would have no rule at all."""
    plan = Plan(tp=2, dp=4, gbs=4, precision="fp8", framework="Megatron-Bridge 0.2")
    scn = Scenario(system=H100, model=model("llama3-8b"), plan=plan, num_gpus=plan.num_gpus,
                   open_knobs=("grad_precision",))
    out = resolve_open_knobs(scn, lambda s: SimpleNamespace(step_time_s=1.0,
                                                            memory=SimpleNamespace(fits=True, overflow_bytes=0)))
    assert out.plan.grad_precision == "bf16"
    assert out.chosen == (("grad_precision", "'bf16' — default of the megatron-bridge stack (not published)"),)


# ---- serving: the layout choice and the stack's limits ---------------------------------------------------------

def test_the_layout_choice_prices_at_most_512_requests(monkeypatch):
    """choose_layout prices each candidate on a run of at most 512 requests of the load: an offline load of 513
    requests (one over) is cut to 512 for every trial (a stand-in simulator records what it is given and rates
    a plan by its tp, so tp 2 of the 2 GPUs wins); the scenario handed back keeps its 513."""
    seen = []

    def fake(trial, *a, **kw):
        seen.append(trial.load.num_requests)
        return SimpleNamespace(result=SimpleNamespace(output_tokens_per_s=float(trial.plan.tp)))

    monkeypatch.setattr(serving_run, "simulate", fake)
    load = Load(arrival="offline", input_tokens=256, output_tokens=64, num_requests=513)
    out = choose_layout(_scn(ServingPlan(tp=1, pp=2), load), ("tp", "pp"))
    assert sorted(seen) == [512, 512]
    assert (out.plan.tp, out.plan.pp) == (2, 1) and out.load.num_requests == 513


def test_trtllm_bench_rounds_a_batch_just_over_1024_to_256():
    """tuning.py by hand, Llama-3 8B (8.030e9 parameters) FP8 on one 85.9e9-byte H100, KV fraction 0.9:
    (85.9e9 − 8.030e9) · 0.9 = 70.08e9 bytes / 65,536 B per token = 1,069,378 tokens; at 522 + 522 tokens a
    request that holds 1,069,378 / 1,044 = 1,024.31 requests, just over 1,024, so the batch is rounded up to a
    multiple of 256: 256·⌈4.0012⌉ = 1,280 (a multiple of 128 would give 1,152). Tokens 1,024.31·2 = 2,048.6 →
    256·⌈8.0024⌉ = 2,304."""
    scn = _scn(ServingPlan(framework="TensorRT-LLM 1.0", weight_precision="fp8", kv_precision="fp8"))
    assert trtllm_bench_limits(scn, 522, 522, 0.9, 522, True) == (1280, 2304)


def test_a_stacks_tp_layout_default_is_taken(monkeypatch):
    """serving_stacks.yaml's layout_defaults may give tp as well as pp and ep (no shipped stack does yet; trtllm-bench
    --tp defaults to 1): under such a stack a run on one GPU that leaves tp out takes the stack's tp 1 — noted as
    its default, so tp is no longer open for the fastest-layout choice."""
    real = serving_defaults.serving_stack
    monkeypatch.setattr(serving_defaults, "serving_stack",
                        lambda fw: dict(real(fw), layout_defaults={"tp": 1, "pp": 1, "ep": 1}))
    out, still = resolve_layout_defaults(_scn(ServingPlan(framework="TensorRT-LLM 1.0")), ("tp", "kv_precision"))
    assert out.plan.tp == 1 and still == ("kv_precision",)
    assert out.chosen == (("tp", "1 — default of the trtllm-bench stack (not published)"),)


# ---- serving: the iteration price ----------------------------------------------------------------------------

def test_an_overlapped_pipeline_loop_does_the_bookkeeping_of_all_pp_micro_batches(monkeypatch):
    """host_bookkeeping_s: with pp stages each rank's executor loop handles all pp micro-batches in turn, so a
    lane's period is at least pp × one micro-batch's bookkeeping. A TensorRT-LLM stack (29 µs per request) whose
    pp loop overlaps the host work (pp_host_serial off, as later builds that wait on an event) at pp 2: 8 decodes
    in an iteration of which the executor handles 1,000 requests takes max(GPU, 29e-6 · 1,000 · 2 = 58 ms) — the
    GPU part of 8 decode tokens of Llama-3 8B is a few ms (16 GB of weights at 3.35 TB/s ≈ 5 ms), so 58 ms."""
    real = serving_cost.serving_stack
    monkeypatch.setattr(serving_cost, "serving_stack", lambda fw: dict(real(fw), pp_host_serial=False))
    scn, _ = resolve_limits(resolve_formats(_scn(ServingPlan(pp=2, framework="TensorRT-LLM 1.0")), ()))
    c = ServingCost(scn, 2048)
    assert c.host_per_request_s == 29e-6 and not c.pp_host_serial
    assert c.iteration_s(8, 8, 8 * 300.0, requests=1000) == pytest.approx(29e-6 * 1000 * 2, rel=1e-12)
    assert c.iteration_s(8, 8, 8 * 300.0, requests=1000) > 2 * c.iteration_s(8, 8, 8 * 300.0, requests=0)


def test_a_run_of_decode_steps_keeps_its_draft_passes():
    """_StepPricer.decode_line is a function of the context equal to the pricer's own iteration with no prompt
    tokens: under speculative decoding (3 draft tokens, a 1-layer draft head) both carry the draft passes over
    the decodes (a millisecond or more here, far above rounding), so the two paths agree to the last bit."""
    plan = ServingPlan(spec_tokens=3, spec_draft_layers=1, framework="TensorRT-LLM 1.0", max_batch=64,
                       max_num_tokens=2048)
    scn, _ = resolve_limits(resolve_formats(_scn(plan), ()))
    step = step_pricer(ServingCost(scn, 2048), 1, 3)
    for dec in (8, 13):
        assert step.draft_s(dec, 0) > 1e-3
        assert step.decode_line(4 * dec, dec, dec, 4)(dec * 300.0) == step(4 * dec, dec, dec * 300.0, 0, 0, 0, dec, 4)


def test_a_static_batch_of_a_window_model_prices_as_without_the_window():
    """A sliding window wider than every sequence (4,096 > 256 + 64 tokens) caps nothing: a static batch
    (TensorRT-LLM 0.9, batch 8) of Llama-3 8B with that window on every layer serves in the same time as the
    model without one (the window path prices each attention op, the plain one through its affine lines; both are
    the same roofline), over the same 1 + 63 iterations."""
    plan = ServingPlan(max_batch=8, policy="static", framework="TensorRT-LLM 0.9")
    load = dataclasses.replace(LOAD, num_requests=8)
    plain = simulate(_scn(plan, load)).result
    win = simulate(_scn(plan, load, dataclasses.replace(model("llama3-8b"), sliding_window=4096))).result
    assert plain.totals.iterations == win.totals.iterations == 1 + 63
    assert win.makespan_s == pytest.approx(plain.makespan_s, rel=1e-12)


# ---- serving: the lanes' KV cache ------------------------------------------------------------------------------

def test_a_lane_holds_whole_kv_blocks():
    """Llama-3 8B at pp 2 on the default stack (16-token blocks): each stage holds kv_tokens // 2 tokens, a number
    that is not a multiple of 16 here, and a lane holds only the whole blocks of it: ⌊(kv_tokens // 2) / 16⌋, an
    integer (the result's blocks_per_lane, which the JSON report prints)."""
    scn = _scn(ServingPlan(pp=2))
    _, lim = resolve_limits(resolve_formats(scn, ()))
    per_stage = lim.memory.kv_tokens // 2
    assert lim.block_tokens == 16 and per_stage % 16
    res = simulate(scn).result
    assert res.kv_blocks_per_lane == per_stage // 16 and isinstance(res.kv_blocks_per_lane, int)


def test_a_request_no_lane_holds_is_refused_on_the_workload_with_whole_blocks():
    """A 60,000 + 10-token request on one H100 with 0.1 % of its memory for KV: it needs ⌈60,010 / 16⌉ = 3,751
    blocks of 16 tokens, more than the lane's whole blocks (kv_tokens // 16); the SpecError names the workload
    (the CLI prints `workload: …`) and states the blocks as a whole number."""
    scn = _scn(ServingPlan(kv_memory_fraction=0.001),
               Load(arrival="offline", input_tokens=60000, output_tokens=10, num_requests=2))
    _, lim = resolve_limits(resolve_formats(scn, ()))
    assert lim.block_tokens == 16
    with pytest.raises(SpecError) as exc:
        check_fits(scn)
    assert exc.value.field == "workload"
    assert str(exc.value) == (f"workload: a request of 60010 tokens needs 3751 KV blocks; one lane of this "
                              f"deployment holds {lim.memory.kv_tokens // 16}")
    assert re.search(r"holds \d+$", str(exc.value))


def test_a_disaggregated_log_names_its_prefill_and_decode_lanes():
    """A disaggregated deployment (2 instances, 1 prefill-only) logs one lane of each kind: the prefill lane's
    records carry role `prefill`, the decode lane's `decode` (IterationRecord.role); none is a plain `lane`."""
    run = simulate(_scn(ServingPlan(replicas=2, prefill_replicas=1), gpus=2))
    roles = {r.role for r in run.result.log}
    assert roles == {"prefill", "decode"}


def test_a_lanes_kv_block_seconds_sum_its_logged_iterations():
    """One lane (1 GPU, tp 1) serving 32 requests: its log holds every iteration it ran, each with the blocks it
    held (the mean over merged steps) and its duration; the run's KV block-seconds are their sum over all of
    them — conservation, not just the last iteration's share (the log here has several records)."""
    res = simulate(_scn()).result
    assert res.lanes == 1 and len(res.log) >= 2
    assert sum(r.kv_blocks_used * r.duration_s for r in res.log) == pytest.approx(res.totals.kv_block_s, rel=1e-12)
    assert res.totals.kv_block_s > res.log[-1].kv_blocks_used * res.log[-1].duration_s * 1.01


# ---- serving: the disaggregated steady state -----------------------------------------------------------------

def _spy_simulate(monkeypatch):
    plans = []
    real = serving_steady.simulate

    def spy(scn, *a, **kw):
        plans.append((scn.plan.replicas, scn.plan.prefill_replicas, scn.num_gpus))
        return real(scn, *a, **kw)

    monkeypatch.setattr(serving_steady, "simulate", spy)
    return plans


def test_the_smallest_deployment_of_a_2_to_3_ratio_is_itself(monkeypatch):
    """5 instances of which 2 prefill-only: prefill : decode = 2 : 3, and gcd(2, 3) = 1, so the smallest deployment
    of that ratio is the 5 instances themselves (5 GPUs at tp 1) — what the steady state simulates."""
    plans = _spy_simulate(monkeypatch)
    plan = ServingPlan(replicas=5, prefill_replicas=2, max_batch=16, max_num_tokens=256)
    steady_lane(_scn(plan, gpus=5))
    assert plans == [(5, 2, 5)]


@pytest.fixture
def cost_extents(monkeypatch):
    """The max_tokens of every ServingCost the steady state builds, in order."""
    built = []
    real = serving_steady.ServingCost

    def spy(scn, max_tokens, calibration=None):
        built.append(max_tokens)
        return real(scn, max_tokens, calibration)

    monkeypatch.setattr(serving_steady, "ServingCost", spy)
    return built


def test_the_disaggregated_steady_state_prices_on_serves_grid(cost_extents):
    """A 1 : 1 disaggregated plan with max_batch 64 and max_num_tokens 64: an iteration holds at most
    max(64, 64 · (1 + 0 draft tokens)) = 64 tokens, so `serve` (simulate) builds its cost grid to 64; the steady
    state builds its own cost model to the same extent (no wider grid, whose last segment would interpolate
    the token times between other points)."""
    scn = _scn(ServingPlan(replicas=2, prefill_replicas=1, max_batch=64, max_num_tokens=64), gpus=2)
    steady_lane(scn)
    assert cost_extents == [64]
    assert simulate(scn).cost.grid[-1] == 64


@pytest.mark.parametrize("spec, extent", [(0, 64), (3, 256)])
def test_a_saturated_lanes_steady_state_prices_on_serves_grid(cost_extents, spec, extent):
    """The colocated steady state likewise (steady_lane's own cost model), max_batch 64 and max_num_tokens 64 on
    TensorRT-LLM 1.0: without drafts max(64, 64 · 1) = 64, with 3 draft tokens max(64, 64 · (1 + 3)) = 256 —
    each the extent of serve's grid for that plan. (A grid of another extent interpolates the token times of its
    last segment between other points and moves the lane's rate by ~0.2 %: the steady_lane mutants bd2746ac,
    554565e4 and 3d54a427 of benchmarks/mutation_equivalent.yaml are not equivalent.)"""
    scn = _scn(ServingPlan(max_batch=64, max_num_tokens=64, spec_tokens=spec, framework="TensorRT-LLM 1.0"))
    steady_lane(scn)
    assert cost_extents == [extent]
    assert simulate(scn).cost.grid[-1] == extent
