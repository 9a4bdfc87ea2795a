"""Serving values the seed-26 mutation sample (benchmarks/mutation.py) found unguarded in schedule/: a pipelined
prompt chunk's attention over its pairs, the hand-off fabric of two instances that exactly fill a scale-up domain,
the cap on a logged lane's records, a prefill-first turn under on-demand KV, the queries a bare lane's decode steps
are priced with under speculative decoding, and the context of eager decode-only runs — each pinned by a hand
value or a structural identity."""
from __future__ import annotations

import pytest

import narrowpath.schedule.serving_sim as serving_sim
from narrowpath.catalog import model, system
from narrowpath.schedule.serving_cost import ServingCost
from narrowpath.schedule.serving_run import simulate
from narrowpath.schedule.serving_sim import LaneSpec
from narrowpath.schedule.serving_stats import LaneTotals
from narrowpath.spec.serving import Load, ServingPlan, ServingScenario
from tests.schedule.lanes import bare_lane

H100 = system("dgx-h100")
LOAD = Load(arrival="offline", input_tokens=256, output_tokens=64, num_requests=32)


def _scn(plan: ServingPlan, load: Load = LOAD, mdl: str = "llama3-8b") -> ServingScenario:
    return ServingScenario(system=H100, model=model(mdl), plan=plan, load=load, num_gpus=plan.num_gpus)


def test_a_pipelined_prompt_chunks_attention_grows_with_its_pairs_as_on_one_gpu():
    """Llama-3 8B (32 layers) in bf16, a 2,048-token prompt chunk, on 1 GPU and on pp 2 (16 layers a stage). The
    chunk attends over P pairs: the first chunk of a prompt P = 2048·2049/2; the same chunk after 2,048 and after
    4,096 earlier tokens 2048·(2048 + 2049/2) and 2048·(4096 + 2049/2), every step 2048² more pairs. Only the
    attention cores see the pairs: on one GPU the step costs 32 layers' worth of the extra attention; on pp 2 the
    micro-batch period is 2 × the slowest stage (the last, with the output layer), whose 16 layers add half of it —
    the same increase, 2·16 = 32 layers' worth. So each 2048² more pairs adds the same time on both layouts (> 0:
    the cores read the pairs)."""
    P = 2048.0
    steps = []
    for pp in (1, 2):
        c = ServingCost(_scn(ServingPlan(pp=pp, weight_precision="bf16", kv_precision="bf16", max_batch=64,
                                         max_num_tokens=4096)), 4096)
        t = [c.iteration_s(P, 0, 0.0, P, P * (done + (P + 1) / 2), done + P, 1) for done in (0.0, 2048.0, 4096.0)]
        steps.append((t[1] - t[0], t[2] - t[1]))
    (a1, b1), (a2, b2) = steps
    assert a1 > 0 and b1 == pytest.approx(a1, rel=1e-9)
    assert (a2, b2) == pytest.approx((a1, b1), rel=1e-9)


def test_two_four_gpu_instances_that_exactly_fill_a_domain_note_a_scale_up_hand_off():
    """A disaggregated Llama-3 8B run of one prefill and one decode instance of tp 4 on a DGX H100: 2·4 = 8 GPUs, the
    whole 8-GPU NVLink domain, so the two instances fit one domain (the hand-off is priced over it when
    2·instance_gpus <= the domain: ServingCost.handoff_s) and the note names the scale-up fabric."""
    load = Load(arrival="offline", input_tokens=128, output_tokens=8, num_requests=8)
    run = simulate(_scn(ServingPlan(tp=4, replicas=2, prefill_replicas=1), load))
    assert run.scenario.plan.instance_gpus == 4 and 2 * 4 == H100.scale_up_domain
    [note] = [n for n in run.result.notes if n.startswith("KV hand-off")]
    assert note.endswith("per request (scale-up fabric)")


def test_a_logged_lane_keeps_only_its_first_log_limit_records(monkeypatch):
    """A lane logs at most LOG_LIMIT records. With the limit at 3, one request of 4 prompt tokens and 6 output tokens
    run one iteration at a time (no merging) takes 6 iterations — its prompt (which emits the first token) and 5
    decode steps of 1 s each — and the log keeps the first 3: the prompt at 0 s and the decodes at 1 s and 2 s."""
    monkeypatch.setattr(serving_sim, "LOG_LIMIT", 3)
    log: list = []
    spec = LaneSpec(4, 64, 16, 16, "decode-first", "reserve", True, merge=False)
    lane, arrays = bare_lane(spec, lambda *a, **kw: 1.0, [4], [6], log)
    lane.run()
    assert arrays["finish"].tolist() == [6.0]
    assert [(r.start_s, r.decodes, r.prompt_tokens) for r in log] == [(0.0, 0, 4), (1.0, 1, 0), (2.0, 1, 0)]


def test_a_prefill_first_turn_under_on_demand_kv_runs_the_waiting_prompt_alone():
    """Prefill-first (a waiting prompt that can be admitted gets an iteration before the running decodes) with
    on-demand KV, an 8-token budget, no chunking: two requests of 8 + 3 tokens arrived at 0, 1 s an iteration. The
    first iteration prefills request 0 (first token at 1 s); request 1 is still admissible, so the second is again a
    prompt-only turn of 8 tokens (first token at 2 s), no decode beside it; then both decode together, twice
    (2 tokens left each), finishing at 4 s."""
    calls = []

    def step(*a, **kw):
        calls.append((a[0], a[1], a[3]))  # T, decodes, prompt tokens
        return 1.0

    spec = LaneSpec(4, 8, 16, 16, "prefill-first", "on-demand", False, merge=False)
    lane, arrays = bare_lane(spec, step, [8, 8], [3, 3])
    lane.run()
    assert calls == [(8, 0, 8), (8, 0, 8), (2, 2, 0), (2, 2, 0)]
    assert arrays["first"].tolist() == [1.0, 2.0] and arrays["finish"].tolist() == [4.0, 4.0]


def test_a_bare_lanes_speculative_decode_steps_are_priced_at_one_plus_the_draft_tokens_queries():
    """A lane priced by a plain function (no decode_line) calls it as step_s(T, dec, dec_ctx, pre_tok, pre_pairs,
    pre_ctx, rows, q) (Lane docstring). With 1 draft token each decode step verifies q = 1 + 1 = 2 queries per
    sequence: one request of 8 + 4 tokens, 1.5 tokens gained a step, decodes its 3 remaining tokens in ⌈3/1.5⌉ = 2
    steps of T = 1·2 tokens, each priced with q = 2 (the prompt iteration too)."""
    calls = []

    def step(*a, **kw):
        calls.append((a[0], a[1], a[3], a[7]))  # T, decodes, prompt tokens, q
        return 1.0

    spec = LaneSpec(4, 64, 16, 16, "decode-first", "reserve", True, spec_tokens=1, spec_gain=1.5, merge=False)
    lane, arrays = bare_lane(spec, step, [8], [4])
    lane.run()
    assert calls == [(8, 0, 8, 2), (2, 1, 0, 2), (2, 1, 0, 2)]
    assert arrays["finish"].tolist() == [3.0]


def test_eager_decode_only_runs_add_up_their_context():
    """Two runs of decode-only iterations no captured graph fits (graph None: eager): 3 iterations of 5 decodes
    reading 300 context tokens in all, then 2 of 6 reading 240: 5 eager iterations, 3·5 + 2·6 = 27 decodes and
    300 + 240 = 540 context tokens."""
    t = LaneTotals()
    t.decode_only(3, 5.0, 300.0, None)
    t.decode_only(2, 6.0, 240.0, None)
    assert (t.eager_iterations, t.eager_decodes, t.eager_decode_ctx) == (5, 27.0, 540.0)
    assert t.padded_decodes == 0.0
