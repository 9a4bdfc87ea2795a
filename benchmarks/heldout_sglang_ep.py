"""Held-out wide expert parallelism: SGLang's DeepSeek-V3 on H100 over InfiniBand, prefill at EP 32, decode at EP 72.

Source: LMSYS blog "Deploying DeepSeek with PD Disaggregation and Large-scale Expert Parallelism on 96 H100 GPUs"
(lm-sys/lm-sys.github.io blog/2025-05-05-large-scale-ep.md @2db4e40, "Evaluation" and "Profile Results"); the launch
flags (EPLB with 32 redundant experts, `--moe-dense-tp-size 1`) from sgl-project/sglang issue #6017. Prefill was
measured on the prefill nodes alone ("assuming unlimited resources for the non-tested phase"): 4 nodes, DP attention
and EP 32, DeepEP normal mode, DeepGEMM, two-batch overlap (TBO): 57,674 / 54,543 / 50,302 input tokens/s per node
at prompts of 1,024 / 2,048 / 4,096 tokens. The batch, 16,384 tokens per device, is stated for the 4,096 row
("Profile Results") and assumed for the other two. That row is the blog's "SGLang (Default)" column, slowed by the
expert imbalance its in-distribution EPLB leaves; its "Simulated Perfect EPLB" column (random expert selection, which
is what the model's `expert_balance: eplb` prices: loads varying only as random assignment does) is 59,337. Stated:
`ep_dispatch: dedup` (DeepEP's normal kernels send a token once per destination node and fan it out over NVLink),
`expert_balance: eplb` with 32 `redundant_experts`, FP8 weights, the token budget; TBO is not modelled for serving
(the blog's ablation credits it with +27 … +35 % at equal tokens per device). Each row is one offline run whose
requests all arrive at once, four full iterations of 16,384 prompt tokens per attention-DP rank, one output token
each; the figure is the input tokens per second per node.

Decode ("SGLang (Default)" column): 9 nodes, DP attention and EP 72 over 256 experts + 32 redundant copies, DeepEP
low-latency mode (pure RDMA, one send per token and expert: `ep_dispatch: all_to_all`, no per-node dedup), CUDA
graphs, TBO, 256 sequences per GPU at a KV length of 2,000: 22,282 output tokens/s per node; the ablation credits TBO
with +25.5 % at 256 tokens per device, so ~17,755 without. Priced as one steady decode iteration of 256 sequences
holding 2,000 tokens each (`ServingCost.iteration_s`), the figure 256 · 8 / iteration per node. Not part of
`validate`, nothing fitted to any of it.

    python benchmarks/heldout_sglang_ep.py
"""
from __future__ import annotations

from narrowpath.validate.inference import run_case

DEEPSEEK_V3 = dict(name="deepseek-v3", layers=61, hidden=7168, heads=128, kv_heads=128, ffn=2048, vocab=129280,
                   experts=256, top_k=8, ffn_act="swiglu", shared_experts=1, dense_layers=3, dense_ffn=18432,
                   attention="mla", q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64,
                   v_head_dim=128)
NODES, GPUS_PER_NODE, TOKENS_PER_DEVICE, ITERATIONS = 4, 8, 16_384, 4
PREFILL = {1024: 57_674, 2048: 54_543, 4096: 50_302}  # prompt tokens: input tokens/s per node
PERFECT_EPLB_4096 = 59_337  # the 4,096 row with random expert selection ("Simulated Perfect EPLB")
DECODE_NODES, DECODE_BATCH, DECODE_KV, DECODE_PER_NODE, TBO_DECODE_GAIN = 9, 256, 2000, 22_282, 1.255


def _case(case_id: str, nodes: int, plan: dict, workload: dict, measured: dict) -> dict:
    """An inference-corpus case of DeepSeek-V3 on `nodes` H100 nodes, attention DP and EP over every GPU, FP8
    weights, SGLang with EPLB and its 32 redundant experts; `plan` adds the phase's own knobs."""
    ranks = nodes * GPUS_PER_NODE
    return {"id": case_id, "kind": "inference", "model": DEEPSEEK_V3,
            "hardware": {"gpu": "H100-SXM-80GB", "num_gpus": ranks, "gpus_per_node": GPUS_PER_NODE},
            "plan": {"tp": 1, "pp": 1, "dp": ranks, "ep": ranks, "weights_precision": "fp8", "framework": "SGLang",
                     "expert_balance": "eplb", "redundant_experts": 32, **plan},
            "workload": {"scenario": "offline", "batch_size": None, "request_rate_per_s": None, **workload},
            "measured": measured}


def prefill_case(isl: int, per_node: float) -> dict:
    """The blog's prefill run as an inference-corpus case: `measured` is the total tokens/s of the 4 nodes (each
    request's one output token counted, as `total_tokens_per_s` does)."""
    requests = TOKENS_PER_DEVICE // isl * NODES * GPUS_PER_NODE  # one full iteration of every rank
    return _case(f"sglang-ep32-prefill-{isl}", NODES,
                 {"ep_dispatch": "dedup", "max_batch": TOKENS_PER_DEVICE // isl, "max_num_tokens": TOKENS_PER_DEVICE},
                 {"concurrency": requests, "input_tokens": isl, "output_tokens": 1,
                  "num_requests": requests * ITERATIONS},
                 {"total_tokens_per_s": per_node * NODES * (isl + 1) / isl})


def decode_case() -> dict:
    """The decode deployment as an inference-corpus case (a short offline run, one request per rank: only its
    iteration cost model is read)."""
    ranks = DECODE_NODES * GPUS_PER_NODE
    return _case("sglang-ep72-decode", DECODE_NODES, {"ep_dispatch": "all_to_all", "max_batch": DECODE_BATCH},
                 {"concurrency": ranks, "input_tokens": DECODE_KV, "output_tokens": 2, "num_requests": ranks},
                 {"output_tokens_per_s": 1.0})


def decode_per_node() -> float:
    """Output tokens/s per node of one steady decode iteration of DECODE_BATCH sequences at DECODE_KV tokens."""
    case = run_case(decode_case(), 0)
    if case.failure:
        raise SystemExit(f"{case.id} FAILED: {case.failure}")
    step_s = case.run.cost.iteration_s(DECODE_BATCH, DECODE_BATCH, DECODE_BATCH * DECODE_KV)
    return DECODE_BATCH * GPUS_PER_NODE / step_s


def main() -> int:
    errors = []
    for isl, per_node in PREFILL.items():
        case = run_case(prefill_case(isl, per_node), 0)
        if case.failure:
            print(case.id, "FAILED:", case.failure)
            return 1
        fig = case.figures["total_tokens_per_s"]
        cost = case.run.cost
        gpu_s = cost.iteration_parts(TOKENS_PER_DEVICE, 0, 0, pre_tokens=TOKENS_PER_DEVICE,
                                     pre_pairs=TOKENS_PER_DEVICE / isl * isl * (isl + 1) / 2)["gpu"]
        exchange_s = sum(t.cost.time_s * t.count for t in cost.token_transfers(0, TOKENS_PER_DEVICE))
        errors.append(abs(fig.error))
        print(f"{case.id:26s} predicted {fig.predicted / NODES * isl / (isl + 1):8.0f} input tok/s per node, "
              f"measured {per_node:6d}  {fig.error * 100:+6.1f} %  | iteration {gpu_s:.2f} s of which expert "
              f"exchange {exchange_s:.2f} s (measured iteration {TOKENS_PER_DEVICE * GPUS_PER_NODE / per_node:.2f} s)")
        if isl == 4096:
            perfect = fig.predicted / NODES * isl / (isl + 1) / PERFECT_EPLB_4096 - 1
            print(f"{'':26s} against the perfectly balanced run ({PERFECT_EPLB_4096}): {perfect * 100:+6.1f} %")
    print(f"prefill: mean |error| {sum(errors) / len(errors) * 100:.1f} % over {len(errors)} rows")
    dec = decode_per_node()
    print(f"sglang-ep72-decode         predicted {dec:8.0f} output tok/s per node, measured {DECODE_PER_NODE:6d} "
          f"(with TBO) {(dec / DECODE_PER_NODE - 1) * 100:+6.1f} %, ~{DECODE_PER_NODE / TBO_DECODE_GAIN:.0f} without "
          f"{(dec * TBO_DECODE_GAIN / DECODE_PER_NODE - 1) * 100:+6.1f} %")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
