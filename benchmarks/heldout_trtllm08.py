"""Held-out check of the `tensorrt-llm-0` serving stack (TensorRT-LLM 0.x static batches: gptSessionBenchmark, one
batch generated to its full output length, catalog/serving_stacks.yaml) on TensorRT-LLM v0.8.0's 'Peak Throughput'
tables (github NVIDIA/TensorRT-LLM docs/source/performance.md as of v0.8.0: "All data was generated using version
0.8.0"; H200, H100 and L40S in FP8, A100 in FP16; GPT-J 6B, Mistral 7B, LLaMA 7B, LLaMA 70B and Falcon 180B; output
tokens/s per GPU). No corpus case comes from this table; nothing is fitted to it and `validate` does not read it.

Each row is the corpus's static-batch template (the TensorRT-LLM 0.7a H200 Llama-2 70B case) moved to the row's
board, tensor parallelism, model, batch and lengths, with `plan.framework: TensorRT-LLM 0.8.0`. The v0.8 reproduction
sections quantize the KV cache with the weights (`"kv_cache_quant_algo": "FP8"` in the checkpoint config) and export
`TRTLLM_ENABLE_XQA=1` for Llama-2 70B and Falcon 180B (Mistral 7B has no section); the XQA kernels of the time took
only 8 query heads per KV head at head size 128 (or 256), so the stack (`xqa_shapes`) runs Mistral 7B and Falcon
180B on masked multi-head attention, each KV head read once per query head through L2 (docs/serving.md; the
forty-first session chose that reading on these rows, tests/validate/test_heldout_trtllm08.py holds it). The A100
table is 16-bit (its Falcon config says bfloat16; the bytes are FP16's).

    python benchmarks/heldout_trtllm08.py [--corpus ../shared/validation/inference-public.yaml] [--rows]
"""
from __future__ import annotations

import copy

from heldout_boards import corpus_args, summarise
from narrowpath.validate.inference import load_inference_corpus, run_case

TEMPLATE = "trtllm-blog-h200-llama2-70b-tp1-bs96-128-4096"
FRAMEWORK = "TensorRT-LLM 0.8.0"
MODELS = {
    "gpt-j-6b": {"name": "gpt-j-6b", "layers": 28, "hidden": 4096, "heads": 16, "kv_heads": 16, "ffn": 16384,
                 "vocab": 50400, "ffn_act": "gelu", "parallel_attn_mlp": True},
    "mistral-7b": {"name": "mistral-7b", "layers": 32, "hidden": 4096, "heads": 32, "kv_heads": 8, "ffn": 14336,
                   "vocab": 32000, "ffn_act": "swiglu"},
    "llama-7b": {"name": "llama-7b", "layers": 32, "hidden": 4096, "heads": 32, "kv_heads": 32, "ffn": 11008,
                 "vocab": 32000, "ffn_act": "swiglu"},
    "llama-70b": {"name": "llama2-70b", "layers": 80, "hidden": 8192, "heads": 64, "kv_heads": 8, "ffn": 28672,
                  "vocab": 32000, "ffn_act": "swiglu"},
    "falcon-180b": {"name": "falcon-180b", "layers": 80, "hidden": 14848, "heads": 232, "kv_heads": 8,
                    "ffn": 59392, "vocab": 65024, "ffn_act": "gelu", "parallel_attn_mlp": True},
}
"""The models' configurations (EleutherAI/gpt-j-6b, mistralai/Mistral-7B-v0.1 — its 4,096-token sliding window
covers every row's context —, LLaMA 7B, Llama-2 70B, tiiuae/falcon-180B: parallel attention and MLP, 8 KV heads)."""

# (gpu, model) -> rows (batch, tp, input, output, measured output tok/s per GPU), as the tables print them
TABLE = {
    ("H200-SXM-141GB", "gpt-j-6b"): [(1024, 1, 128, 128, 29168), (120, 1, 128, 2048, 9472), (64, 1, 2048, 128, 2961),
                                     (64, 1, 2048, 2048, 4149)],
    ("H200-SXM-141GB", "mistral-7b"): [(896, 1, 128, 128, 20569), (120, 1, 128, 2048, 8968),
                                       (84, 1, 2048, 128, 2450), (56, 1, 2048, 2048, 3868)],
    ("H200-SXM-141GB", "llama-7b"): [(896, 1, 128, 128, 20548), (120, 1, 128, 2048, 8343), (84, 1, 2048, 128, 2429),
                                     (56, 1, 2048, 2048, 3530)],
    ("H200-SXM-141GB", "llama-70b"): [(512, 1, 128, 128, 3844), (512, 2, 128, 2048, 4008), (64, 1, 2048, 128, 421),
                                      (64, 1, 2048, 2048, 1461)],
    ("H200-SXM-141GB", "falcon-180b"): [(1024, 4, 128, 128, 1116), (1024, 4, 128, 2048, 990),
                                        (64, 4, 2048, 128, 118), (64, 4, 2048, 2048, 269)],
    ("H100-SXM5-80GB", "gpt-j-6b"): [(1024, 1, 128, 128, 27357), (120, 1, 128, 2048, 7831), (64, 1, 2048, 128, 2661),
                                     (64, 1, 2048, 2048, 3409)],
    ("H100-SXM5-80GB", "mistral-7b"): [(896, 1, 128, 128, 20517), (120, 1, 128, 2048, 8619),
                                       (64, 1, 2048, 128, 2438), (56, 1, 2048, 2048, 3733)],
    ("H100-SXM5-80GB", "llama-7b"): [(896, 1, 128, 128, 20241), (120, 1, 128, 2048, 6922), (64, 1, 2048, 128, 2170),
                                     (56, 1, 2048, 2048, 2816)],
    ("H100-SXM5-80GB", "llama-70b"): [(1024, 2, 128, 128, 3269), (512, 4, 128, 2048, 2718), (96, 2, 2048, 128, 347),
                                      (64, 2, 2048, 2048, 1020)],
    ("H100-SXM5-80GB", "falcon-180b"): [(512, 4, 128, 128, 1048), (1024, 8, 128, 2048, 836),
                                        (64, 4, 2048, 128, 114), (64, 4, 2048, 2048, 250)],
    ("L40S", "gpt-j-6b"): [(512, 1, 128, 128, 7992), (64, 1, 128, 2048, 1874), (32, 1, 2048, 128, 693),
                           (32, 1, 2048, 2048, 768)],
    ("L40S", "mistral-7b"): [(896, 1, 128, 128, 9679), (120, 1, 128, 2048, 4401), (84, 1, 2048, 128, 979),
                             (56, 1, 2048, 2048, 1721)],
    ("L40S", "llama-7b"): [(256, 1, 128, 128, 5954), (64, 1, 128, 2048, 1654), (32, 1, 2048, 128, 579),
                           (16, 1, 2048, 2048, 542)],
    ("L40S", "llama-70b"): [(256, 2, 128, 128, 561), (256, 4, 128, 2048, 471), (16, 2, 2048, 128, 49),
                            (64, 4, 2048, 2048, 177)],
    ("L40S", "falcon-180b"): [(512, 8, 128, 128, 152), (256, 8, 128, 2048, 200), (32, 8, 2048, 128, 15),
                              (16, 8, 2048, 2048, 39)],
    ("A100-SXM4-80GB", "gpt-j-6b"): [(512, 1, 128, 128, 6810), (32, 1, 128, 2048, 1658), (32, 1, 2048, 128, 631),
                                     (16, 1, 2048, 2048, 692)],
    ("A100-SXM4-80GB", "mistral-7b"): [(896, 1, 128, 128, 6472), (120, 1, 128, 2048, 3812), (84, 1, 2048, 128, 734),
                                       (56, 1, 2048, 2048, 1607)],
    ("A100-SXM4-80GB", "llama-7b"): [(256, 1, 128, 128, 5353), (32, 1, 128, 2048, 1518), (32, 1, 2048, 128, 547),
                                     (16, 1, 2048, 2048, 613)],
    ("A100-SXM4-80GB", "llama-70b"): [(256, 4, 128, 128, 565), (128, 4, 128, 2048, 595), (32, 4, 2048, 128, 66),
                                      (32, 4, 2048, 2048, 185)],
    ("A100-SXM4-80GB", "falcon-180b"): [(256, 8, 128, 128, 193), (256, 8, 128, 2048, 203), (16, 8, 2048, 128, 20)],
}
FORMAT = {"A100-SXM4-80GB": "fp16"}
"""Weight (and so KV) format of a table other than FP8."""
NODE = {"L40S": 8, "H100-SXM5-80GB": 8, "A100-SXM4-80GB": 8, "H200-SXM-141GB": 8}


def predict(template: dict, gpu: str, model: str, batch: int, tp: int, isl: int, osl: int) -> float | str:
    """Predicted output tokens/s per GPU of one row (or why it failed)."""
    raw = copy.deepcopy(template)
    raw["model"] = dict(MODELS[model])
    raw["hardware"].update(gpu=gpu, num_gpus=tp, gpus_per_node=NODE[gpu])
    raw["plan"].update(tp=tp, framework=FRAMEWORK, weights_precision=FORMAT.get(gpu, "fp8"),
                       kv_precision=FORMAT.get(gpu))
    raw["workload"].update(batch_size=batch, input_tokens=isl, output_tokens=osl)
    raw["measured"] = {"output_tokens_per_s": 1.0, "percentile": "mean"}
    raw["id"] = f"v0.8 {gpu} {model} bs{batch} tp{tp} {isl}/{osl}"
    case = run_case(raw, 0)
    return case.failure if case.failure else case.figures["output_tokens_per_s"].predicted / tp


def main() -> int:
    args = corpus_args(__doc__, rows=True)
    template = {r["id"]: r for r in load_inference_corpus(args.corpus)}[TEMPLATE]
    errors: dict[str, dict[str, list[float]]] = {}
    for (gpu, model), rows in TABLE.items():
        for batch, tp, isl, osl, measured in rows:
            p = predict(template, gpu, model, batch, tp, isl, osl)
            if isinstance(p, str):
                print(f"{gpu} {model} bs{batch} tp{tp} {isl}/{osl}: FAILED: {p}")
                continue
            err = p / measured - 1.0
            for by, key in (("board", gpu), ("model", model), ("length", "short" if osl == 128 else "long")):
                errors.setdefault(by, {}).setdefault(key, []).append(err)
            if args.rows:
                print(f"{gpu:15s} {model:12s} bs{batch:<5d} tp{tp} {isl:>5}/{osl:<5} predicted {p:9.0f} measured "
                      f"{measured:9.0f} ({err * 100:+6.1f} %)")
    for by, groups in errors.items():  # each grouping covers every row once
        print(f"-- by {by}")
        summarise(groups, "error")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
