"""Held-out disaggregated serving: TensorRT-LLM's DeepSeek-R1 (NVFP4) on GB200, prefill and decode pools of their own
layouts, clients in a closed loop, timed end to end.

Source: NVIDIA/TensorRT-LLM `tests/integration/defs/perf/disagg/perf_script_test_results.csv` @7fc0ed50 (runs of
2025-10-31; the same figures in `backend_comparison.csv`), the layouts from `test_configs/disagg/perf/
deepseek-r1-fp4_001.yaml` and `_009.yaml` (read at later commits; each config's concurrency list × its generation
servers matches the CSV). The harness reads the client's "Median TTFT (ms)" and "Median E2EL (ms)".
- Case A, 1k/1k, 36 GPUs (config 001, NIXL): one context server DEP4 (tp 1, attention DP 4, EP 4; max_batch 4,
  max_num_tokens 4,608, no CUDA graphs) and four generation servers TEP8 (tp 8, EP 8; max_batch 32,
  max_num_tokens 128, CUDA graphs with padding: the trtllm-bench stack's list); 128 decode slots.
- Case B, 8k/1k, 28 GPUs (config 009, NIXL): one context server DEP4 (max_batch 1, max_num_tokens 8,448) and three
  generation servers TEP8 (max_batch 32, max_num_tokens 32); 96 decode slots.
- Case C, 1k/1k, 36 GPUs (configs 003 NIXL / 007 UCX; added in the thirty-seventh session, first run as written):
  one context server DEP4 as in A and one wide-EP generation server DEP32 (tensor_parallel_size 32 with attention
  DP: tp 1, attention DP 32, EP 32, the WIDEEP MoE backend, no load balancer; max_batch 32, max_num_tokens 32);
  1,024 decode slots, 1,075 clients.
- Case D, 8k/1k, 40 GPUs (configs 011 / 015; same session): six context servers DEP4 (max_batch 1, max_num_tokens
  8,448) and one generation server DEP16 (max_batch 64, max_num_tokens 64); 1,024 decode slots, 1,075 clients. Its
  UCX twin's E2EL is 21 % below the NIXL run compared here.
(The YAMLs of C and D say `supported_gpus: [GB200, GB300]`; the rows' locked clocks, 2,062 / 3,996 MHz, are the
harness's GB200 setting. Their stated KV fractions, 0.75–0.9, are not applied: no lane comes near its KV room.)
All: NVFP4 weights, FP8 KV cache, no MTP, GB200 (4 GPUs a tray, one NVLink domain of 72). Client: bench_serving's
random data set with --random-range-ratio 0.8 (prompt and output lengths uniform in [0.8 L, L], seeded here),
--ignore-eos, streaming, closed loop at --max-concurrency C with 8·C prompts. The UCX twins of the same runs differ
by up to 27 % (case B's TTFT): the measurements' own spread.

What is priced: ServingPlan.prefill_* (the context servers' layout and limits), the closed loop across the pools
(schedule.serving_disagg), the client's first token read from the generation server (TensorRT-LLM's disaggregated
server streams the generation request; it arrives once a generation server has admitted the request, after the KV
hand-off), the engine's one-shot all-reduce inside the NVLink domain (added after this check's first run showed the
small decode step ~20 % slow with NCCL's ring latency; its formula is held to a kernel benchmark, not to this).
Not priced: the disaggregated server's HTTP round trips (a context request, its response, then the
generation request) and the KV transfer engine's set-up per request. Not part of `validate`, nothing fitted to it.

    python benchmarks/heldout_trtllm_disagg.py
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from narrowpath.catalog import model, system
from narrowpath.schedule.serving_run import simulate
from narrowpath.spec.serving import Load, ServingPlan, ServingScenario

STACK = "TensorRT-LLM 1.0 (PyTorch backend)"


@dataclass(frozen=True)
class Case:
    """One configuration of the CI file: lengths, the generation servers' layout (tp, attention dp, ep), how many of
    each server, each pool's batch and token limits, and {concurrency: (median TTFT ms, median E2EL ms)} measured
    with NIXL and with UCX."""

    isl: int
    osl: int
    gen: tuple[int, int, int]
    gens: int
    ctxs: int
    ctx_batch: int
    ctx_tokens: int
    gen_batch: int
    gen_tokens: int
    nixl: dict
    ucx: dict


CASES = {
    "A-1k1k": Case(1024, 1024, (8, 1, 8), 4, 1, 4, 4608, 32, 128,
                   {4: (213.4, 7582.2), 8: (138.13, 7938.94), 16: (144.3, 8909.28), 32: (155.71, 10011.83),
                    64: (203.81, 11710.77), 144: (1022.05, 14370.38)},
                   {4: (215.67, 7046.52), 8: (136.98, 7796.78), 16: (140.83, 8724.92), 32: (150.72, 9970.68),
                    64: (192.13, 11793.41), 144: (1258.2, 14253.39)}),
    "B-8k1k": Case(8192, 1024, (8, 1, 8), 3, 1, 1, 8448, 32, 32,
                   {3: (587.58, 6704.8), 6: (426.57, 7004.49), 12: (475.85, 8297.16), 24: (659.95, 9336.38),
                    48: (789.89, 10951.21), 102: (3109.88, 15371.44)},
                   {3: (508.64, 7740.73), 6: (352.7, 8214.9), 12: (368.31, 9470.91), 24: (483.38, 10601.19),
                    48: (604.49, 12568.55), 102: (1919.5, 16031.31)}),
    "C-1k1k-dep32": Case(1024, 1024, (1, 32, 32), 1, 1, 4, 4608, 32, 32,
                         {1075: (1038.87, 21084.77)}, {1075: (878.79, 20692.44)}),
    "D-8k1k-dep16": Case(8192, 1024, (1, 16, 16), 1, 6, 1, 8448, 64, 64,
                         {1075: (1255.12, 28602.0)}, {1075: (1122.63, 22521.71)}),
}
RANGE_RATIO = 0.8
PROMPTS_PER_CLIENT = 8


def scenario(name: str, concurrency: int, seed: int = 0) -> ServingScenario:
    """Case `name` at `concurrency` clients: the deployment as configured, 8·C requests of lengths drawn uniformly in
    [0.8 L, L] (seeded)."""
    k = CASES[name]
    rng = np.random.default_rng(seed)
    n = PROMPTS_PER_CLIENT * concurrency
    ins = rng.integers(int(RANGE_RATIO * k.isl), k.isl + 1, n)
    outs = rng.integers(int(RANGE_RATIO * k.osl), k.osl + 1, n)
    tp, dp, ep = k.gen
    plan = ServingPlan(tp=tp, dp=dp, ep=ep, replicas=k.gens + k.ctxs, prefill_replicas=k.ctxs, prefill_tp=1,
                       prefill_dp=4, prefill_ep=4, prefill_max_batch=k.ctx_batch, prefill_max_num_tokens=k.ctx_tokens,
                       max_batch=k.gen_batch, max_num_tokens=k.gen_tokens, weight_precision="fp4", kv_precision="fp8",
                       framework=STACK)
    load = Load(arrival="trace", requests=tuple((0.0, int(i), int(o)) for i, o in zip(ins, outs)),
                concurrency=concurrency)
    return ServingScenario(name=f"trtllm-disagg-{name}-c{concurrency}", system=system("gb200-nvl72"),
                           model=model("deepseek-v3"), plan=plan, load=load, num_gpus=plan.num_gpus)


def predict(name: str, concurrency: int) -> dict:
    """Median TTFT and E2EL (ms) of the simulated run, and what makes up the first token's time."""
    res = simulate(scenario(name, concurrency), log_lane=False).result
    return {"ttft_ms": float(np.median(res.ttft_s)) * 1e3, "e2el_ms": float(np.median(res.e2e_s)) * 1e3,
            "prefill_ms": float(np.median(res.kv_ready_s - res.arrival_s)) * 1e3,
            "slot_wait_ms": float(np.median(res.first_token_s - res.kv_ready_s)) * 1e3,
            "tpot_ms": float(np.median(res.tpot_s)) * 1e3}


def rows() -> list[dict]:
    out = []
    for name, case in CASES.items():
        nixl, ucx = case.nixl, case.ucx
        for c, (ttft, e2el) in nixl.items():
            p = predict(name, c)
            out.append({"case": name, "concurrency": c, **p, "measured_ttft_ms": ttft, "measured_e2el_ms": e2el,
                        "ucx_ttft_ms": ucx[c][0], "ucx_e2el_ms": ucx[c][1],
                        "ttft_error": p["ttft_ms"] / ttft - 1, "e2el_error": p["e2el_ms"] / e2el - 1})
    return out


def main() -> int:
    table = rows()
    print(f"{'case':8s} {'C':>4s}  {'TTFT pred':>9s} {'meas':>8s} {'err':>7s}  {'E2EL pred':>9s} {'meas':>8s} "
          f"{'err':>7s}  | prefill  slot wait  TPOT   (UCX twin TTFT / E2EL)")
    for r in table:
        print(f"{r['case']:8s} {r['concurrency']:4d}  {r['ttft_ms']:9.1f} {r['measured_ttft_ms']:8.1f} "
              f"{r['ttft_error'] * 100:+6.1f}%  {r['e2el_ms']:9.1f} {r['measured_e2el_ms']:8.1f} "
              f"{r['e2el_error'] * 100:+6.1f}%  | {r['prefill_ms']:7.1f} {r['slot_wait_ms']:9.1f} {r['tpot_ms']:6.2f}"
              f"   ({r['ucx_ttft_ms']:.0f} / {r['ucx_e2el_ms']:.0f})")
    for key in ("ttft_error", "e2el_error"):
        errs = [abs(r[key]) for r in table]
        print(f"{key[:4].upper()}: mean |error| {np.mean(errs) * 100:.1f} %, worst {max(errs) * 100:.1f} % "
              f"over {len(errs)} rows")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
