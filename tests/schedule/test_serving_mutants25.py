"""Serving values the seed-25 mutation sample (benchmarks/mutation.py) found unguarded in schedule/: the static
batch of a stack whose defaults give no batch size — pinned by the tool's documented default."""
from __future__ import annotations

from narrowpath.catalog import model, system
from narrowpath.catalog.serving import serving_stack
from narrowpath.schedule.serving_defaults import resolve_limits
from narrowpath.spec.serving import Load, ServingPlan, ServingScenario


def test_a_static_session_on_a_stack_without_a_batch_default_runs_256_sequences():
    """A static policy asked of vLLM (whose stack entry takes its batch limits from vLLM's own device heuristic and
    so gives no max_batch default) with an offline load (no fixed batch size): the static batch per micro-batch
    falls back to the tool's default of 256 sequences (serving_stacks.yaml `default`: "fixed limits of 256
    sequences"; vLLM's own max_num_seqs before 1,024), and its token budget is that whole batch's prompts,
    256 × 256 = 65,536 tokens."""
    assert "max_batch" not in serving_stack("vLLM 0.10")["defaults"]
    assert serving_stack("no such engine")["defaults"]["max_batch"] == 256
    plan = ServingPlan(framework="vLLM 0.10", policy="static", weight_precision="bf16", kv_precision="bf16")
    load = Load(arrival="offline", input_tokens=256, output_tokens=64, num_requests=32)
    scn = ServingScenario(system=system("dgx-h100"), model=model("llama3-8b"), plan=plan, load=load,
                          num_gpus=plan.num_gpus)
    out, lim = resolve_limits(scn)
    assert (out.plan.max_batch, lim.max_batch) == (256, 256)
    assert (out.plan.max_num_tokens, lim.max_num_tokens) == (256 * 256, 65_536)
