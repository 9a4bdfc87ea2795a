"""Serving layout choice's error, TensorRT-LLM's run-time batch tuning under a static batch, a static run's
iteration log and the order of requests that arrive together, checked by hand where mutation testing
(benchmarks/mutation.py, seed 20) found them loose."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from narrowpath.catalog import model, system
from narrowpath.errors import SpecError
from narrowpath.schedule import serving_defaults
from narrowpath.schedule.serving_choose import choose_layout
from narrowpath.schedule.serving_defaults import resolve_formats, resolve_limits
from narrowpath.schedule.serving_run import simulate
from narrowpath.spec.serving import Load, ServingPlan, ServingScenario

LOAD = Load(arrival="offline", input_tokens=256, output_tokens=64, num_requests=32)


def _scn(plan: ServingPlan = ServingPlan(), load: Load = LOAD, mdl: str = "llama3-8b", sys_id: str = "dgx-h100"):
    return ServingScenario(system=system(sys_id), model=model(mdl), plan=plan, load=load, num_gpus=plan.num_gpus)


# ---- the layout choice ----------------------------------------------------------------------------------------

def test_no_layout_with_two_open_knobs_names_both_and_the_first_as_the_field():
    """Llama-3 70B (~70.6 B parameters, 141 GB in bf16) on one 80 GB H100 with tp and pp open: the only layout is
    tp 1, pp 1, whose weights do not fit, so the choice fails. The message lists the open knobs joined by ', '
    ('tp, pp') and the error's field is the first of them, plan.tp (the text before the first comma)."""
    with pytest.raises(SpecError) as exc:
        choose_layout(_scn(mdl="llama3-70b"), ("tp", "pp"))
    assert exc.value.field == "plan.tp"
    assert str(exc.value).startswith("plan.tp: no value of the unpublished tp, pp serves this load (")


# ---- what a stack fills in ------------------------------------------------------------------------------------

def test_a_static_batch_is_not_tuned_at_run_time(monkeypatch):
    """TensorRT-LLM 0.17 (stack tensorrt-llm-0.1x, runtime_batch_tuning true) given a fixed batch of 256
    requests of 100 + 100 tokens on one GPU: the policy is static and the batch per lane 256 / (1 replica · dp 1 ·
    pp 1) = 256. The KV pool is fixed at 20,000 tokens (so the case does not move with the memory model): the
    dynamic batch tuner would see 20,000 / 200 = 100 sequences and pick the table's 128 (< 144), but a static
    session runs its whole batch (the tuner is for in-flight batching), so max_batch stays 256 and there is no
    'runtime batch' note. The same stack under in-flight batching (decode-first, max_batch 256 given) is tuned
    down to 128, with the note."""
    real_memory = serving_defaults.serving_memory
    monkeypatch.setattr(serving_defaults, "serving_memory",
                        lambda *a, **kw: dataclasses.replace(real_memory(*a, **kw), kv_tokens=20_000))
    batch = Load(arrival="fixed-batch", batch_size=256, input_tokens=100, output_tokens=100, num_requests=256)
    scn, lim = resolve_limits(resolve_formats(_scn(ServingPlan(framework="TensorRT-LLM 0.17"), batch), ()))
    assert scn.plan.policy == "static"
    assert lim.memory.kv_tokens == 20_000
    assert lim.max_batch == 256 and scn.plan.max_batch == 256
    assert "runtime batch" not in dict(scn.chosen)
    inflight = ServingPlan(framework="TensorRT-LLM 0.17", policy="decode-first", max_batch=256, max_num_tokens=4096)
    offline = Load(arrival="offline", input_tokens=100, output_tokens=100, num_requests=256)
    scn2, lim2 = resolve_limits(resolve_formats(_scn(inflight, offline), ()))
    assert lim2.max_batch == 128
    assert dict(scn2.chosen)["runtime batch"].startswith("128 — TensorRT-LLM's dynamic batch tuning for a KV cache "
                                                         "holding 100 sequences of 200 tokens")


# ---- the static run's log ---------------------------------------------------------------------------------------

def test_a_static_runs_log_records_when_each_iteration_starts():
    """A fixed batch of 4 requests of 64 + 3 tokens, 8 requests in all, on one H100 (static policy, max_batch 4):
    two batches, each one prefill iteration (256 prompt tokens) then 2 merged decode steps (output tokens 2 and 3).
    All arrive at 0, so the log's iterations run back to back from 0: the first prefill starts at 0, the first
    decode run when the first batch's first tokens come out, the second prefill when the first batch finishes,
    the second decode run at the second batch's first tokens; each starts where the one before ends."""
    load = Load(arrival="fixed-batch", batch_size=4, input_tokens=64, output_tokens=3, num_requests=8)
    run = simulate(_scn(load=load))
    res = run.result
    assert run.scenario.plan.policy == "static" and run.limits.max_batch == 4
    log = res.log
    assert [(r.steps, r.decodes, r.prompt_tokens) for r in log] == [(1, 0, 256), (2, 4, 0), (1, 0, 256), (2, 4, 0)]
    starts = [r.start_s for r in log]
    assert starts[0] == 0.0
    assert starts[1] == pytest.approx(res.first_token_s[0], rel=1e-12)
    assert starts[2] == pytest.approx(res.finish_s[0], rel=1e-12)
    assert starts[3] == pytest.approx(res.first_token_s[4], rel=1e-12)
    for a, b in zip(log, log[1:]):
        assert b.start_s == pytest.approx(a.start_s + a.duration_s, rel=1e-12)


# ---- requests that arrive together ------------------------------------------------------------------------------

def test_requests_that_arrive_together_are_served_in_the_traces_order():
    """A trace of 20 requests of 16 + 2 tokens, the even ones at 0 s and the odd ones at 1,000 s (after the even
    ones are all done), on one lane that holds one sequence at a time (max_batch 1): the ten that arrive at 0 are
    served one after another in the trace's order (a stable sort of the arrival times), so their first-token and
    finish times rise with their index, and each starts only after the one before has finished."""
    reqs = tuple(((i % 2) * 1000.0, 16, 2) for i in range(20))
    run = simulate(_scn(ServingPlan(max_batch=1, max_num_tokens=64), Load(arrival="trace", requests=reqs)),
                   log_lane=False)
    first, finish = run.result.first_token_s[::2], run.result.finish_s[::2]
    assert finish.max() < 1000.0
    assert np.all(np.diff(first) > 0) and np.all(np.diff(finish) > 0)
    assert np.all(first[1:] > finish[:-1])
