"""Held-out wide expert parallelism: SGLang's DeepSeek-V3 prefill on 4 nodes of 8 H100 (EP 32 over InfiniBand).

Source: LMSYS blog "Deploying DeepSeek with PD Disaggregation and Large-scale Expert Parallelism on 96 H100 GPUs"
(lm-sys/lm-sys.github.io blog/2025-05-05-large-scale-ep.md @2db4e40, section "Evaluation"). Its prefill figures
were measured on the prefill nodes alone ("assuming unlimited resources for the non-tested phase"): 4 nodes, DP
attention and EP 32 (`--moe-dense-tp-size 1`), DeepEP normal mode, DeepGEMM, two-batch overlap, EPLB with 32
redundant experts, a batch of 16,384 tokens per device: 57,674 / 54,543 / 50,302 input tokens/s per node at prompts
of 1,024 / 2,048 / 4,096 tokens. What the run states and the model can take is stated (`ep_dispatch: dedup` for
DeepEP's one copy per destination node, `expert_balance: eplb`, FP8 weights, the token budget); two-batch overlap is
not modelled for serving, and the 32 redundant experts are not (their spare copies only balance the load, which
`eplb` already takes as balanced). Each row is one offline run whose requests all arrive at once, four full
iterations of 16,384 prompt tokens per attention-DP rank, one output token each; the figure is the input tokens per
second per node. Not part of `validate`, nothing fitted to it.

The blog's decode figure (9 nodes, EP 72 over 288 expert copies) cannot be stated: 72 ranks do not divide
DeepSeek-V3's 256 experts, and the redundant copies are what make them divide.

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


def prefill_case(isl: int, per_node: float) -> dict:
    """The blog's prefill run as an inference-corpus case: `measured` is the total tokens/s of the 4 nodes (each
    request's one output token counted, as `total_tokens_per_s` does)."""
    ranks = NODES * GPUS_PER_NODE
    per_rank = TOKENS_PER_DEVICE // isl
    return {"id": f"sglang-ep32-prefill-{isl}", "kind": "inference", "model": DEEPSEEK_V3,
            "hardware": {"gpu": "H100-SXM-80GB", "num_gpus": ranks, "gpus_per_node": GPUS_PER_NODE},
            "plan": {"tp": 1, "pp": 1, "dp": ranks, "ep": ranks, "weights_precision": "fp8", "framework": "SGLang",
                     "ep_dispatch": "dedup", "expert_balance": "eplb", "max_batch": per_rank,
                     "max_num_tokens": TOKENS_PER_DEVICE},
            "workload": {"scenario": "offline", "batch_size": None, "concurrency": per_rank * ranks,
                         "request_rate_per_s": None, "input_tokens": isl, "output_tokens": 1,
                         "num_requests": per_rank * ranks * ITERATIONS},
            "measured": {"total_tokens_per_s": per_node * NODES * (isl + 1) / isl}}


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
              f"exchange {exchange_s:.2f} s (measured iteration {TOKENS_PER_DEVICE / (per_node / GPUS_PER_NODE):.2f} s)")
    print(f"mean |error| {sum(errors) / len(errors) * 100:.1f} % over {len(errors)} rows")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
