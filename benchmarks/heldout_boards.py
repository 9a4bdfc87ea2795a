"""Held-out check of the boards no corpus validates (GH200, L40S) against the boards it does (H100, A100): the ratios
of TensorRT-LLM's v0.17 'Performance Overview' (github NVIDIA/TensorRT-LLM docs/source/performance/perf-overview.md
@258c7540, trtllm-bench, in-flight batching, one table whose columns are H200, H100, GH200 480GB, L40S and A100 on the
same models, lengths and engine settings).

Each row is the board's throughput over the H100's for the same model, layout and ISL/OSL, measured against
predicted, both sides priced with `plan.framework: TensorRT-LLM 0.17` as the table states (the `tensorrt-llm-0.1x`
stack: in-flight batching on the C++ executor with TensorRT engines; the GH200 rows at the 0.95 KV fraction their
gptManagerBenchmark command passes). A ratio cancels what the boards share — the stack, the engine settings, the
model — and checks the board: its peaks, its memory (GH200's 96 GB against 80 GB decides how many 70B sequences fit),
its fabric (L40S's PCIe against NVSwitch at tp 4 and 8) and its provisional calibration. benchmarks/
heldout_trtllm017.py prices the same rows absolutely. Not part of `validate` and not used to fit anything.

    python benchmarks/heldout_boards.py [--corpus ../shared/validation/inference-public.yaml]
"""
from __future__ import annotations

import argparse
import copy
import math
from pathlib import Path

from narrowpath.validate.inference import load_inference_corpus, run_case

LENGTHS = ((128, 128), (128, 2048), (128, 4096), (500, 2000), (1000, 1000), (2048, 128), (2048, 2048), (5000, 500),
           (20000, 2000))
"""The table's ISL/OSL rows, in its order."""
NREQ = {(128, 128): 30000, (128, 2048): 3000, (128, 4096): 1500, (1000, 2000): 1500, (2048, 128): 3000,
        (2048, 2048): 1500, (5000, 500): 1500, (1000, 1000): 3000, (500, 2000): 3000, (20000, 2000): 1000}
"""The reproduction section's $num_requests per ISL/OSL."""

# (template corpus case, tp, model put in its place or None) -> {gpu: measured output tok/s per LENGTHS row,
# None where the table is empty}
TABLE = {
    ("trtllm-perf-llama31-8b-h100-tp1-fp8-128-2048", 1, None): {
        "H100-SXM5-80GB": (28836.77, 21109.38, 13593.65, 16500.69, 15244.78, 3556.73, 9488.42, 3559.36, 1401.31),
        "GH200-96GB": (29852.96, 21769.55, 14189.89, 17137.29, 16482.77, 3843.95, 10265.9, 3932.58, 1560.2),
        "L40S": (9104.61, 5365.81, 3025.92, 4273.75, 4054.71, 1066.52, 2225.27, 981.2, 327.97),
        "H200-SXM-141GB": (29526.04, 25398.86, 17370.8, 21020.81, 17537.96, 3794.14, 11968.5, 3987.79, 1804.1),
        "A100-SXM4-80GB": (6627.27, 5255.99, 3453.79, 4276.58, 3786.83, 799.61, 2424.16, 825.13, 330.04),
    },
    ("trtllm-perf-llama33-70b-h200-tp1-fp8-1000-1000", 1, None): {
        "H100-SXM5-80GB": (3378.03, 911.62, 426.32, 775.57, 839.97, 343.29, None, 245.34, None),
        "GH200-96GB": (3636.91, 2082.74, 1263.98, 1973.86, 1746.12, 424.96, 1086.93, 422.36, None),
        "H200-SXM-141GB": (4020.75, 4165.68, 2651.75, 3018.39, 2823.45, 465.99, 1913.8, 560.16, 279.52),
    },
    ("trtllm-perf-llama33-70b-h100-tp2-fp8-128-2048", 2, None): {
        "H100-SXM5-80GB": (6645.12, 6169.58, 3897.06, 4972.57, 4390.53, 772.66, 2898.16, 919.73, 443.01),
        "H200-SXM-141GB": (6823.01, 8290.35, 6526.67, 6848.02, 5164.76, 809, 4183.88, 1025.38, 640.62),
        "A100-SXM4-80GB": (1313.96, 531.26, None, 439.41, 472.94, 148.96, 261.1, 121.47, None),
    },
    ("trtllm-perf-llama33-70b-h100-tp2-fp8-128-2048", 4, None): {
        "H100-SXM5-80GB": (11127.53, 11511.93, 7439.41, 9836.7, 7430.99, 1302.6, 5480.03, 1602.78, 920.19),
        "L40S": (1523.52, 1942.66, 1440.23, 1634.72, 1209.25, 177.72, 969.68, 249.52, 162.25),
        "H200-SXM-141GB": (11098.63, 14156, 10574.06, 12452.79, 8911.29, 1358.06, 7130.44, 1811.55, 1199.68),
        "A100-SXM4-80GB": (2733.48, 2811.27, 1976.49, 2275.79, 1921.77, 325.15, 1393.64, 392.62, 212.08),
    },
    ("trtllm-perf-llama33-70b-h100-tp2-fp8-128-2048", 8, None): {
        "H100-SXM5-80GB": (14730.69, 17061.82, 14171.43, 14679.33, 11451.16, 1923.41, 8801.95, 2457.42, 1512.6),
        "L40S": (1464.03, 2303.31, 2018.22, 1971.96, 1333.62, 176.16, 1200.16, 259.71, 209.87),
        "H200-SXM-141GB": (15355.84, 21195.88, 16941.52, 17278.4, 13181.24, 1983.03, 11142.47, 2717.83, 1920.45),
        "A100-SXM4-80GB": (4717.62, 5241.5, 3724.67, 4445.37, 3320.41, 542.38, 2553.71, 696.34, 413.38),
    },
    ("trtllm-perf-llama31-8b-h100-tp1-fp8-128-2048", 1, "mixtral-8x7b"): {
        "H100-SXM5-80GB": (15962.49, 8290.13, 4784.86, 6800.6, 6868.52, 1892.81, 3983.1, 1764.7, 673.7),
        "GH200-96GB": (16859.18, 11120.16, 6610.47, 9192.86, 8849.18, 1994.31, 5545.46, 2078.27, 860.68),
        "H200-SXM-141GB": (17157.72, 15095.21, 9534.62, 12105.27, 10371.36, 2009.67, 6940.32, 2309.1, 1151.78),
    },
    ("trtllm-perf-llama31-8b-h100-tp1-fp8-128-2048", 2, "mixtral-8x7b"): {
        "H100-SXM5-80GB": (27451.13, 22830.08, 14237.01, 17036.04, 15770.89, 3333.68, 10685.85, 3646.09, 1757.45),
        "H200-SXM-141GB": (27825.34, 29584.05, 21564.68, 23410.63, 19151.19, 3383.16, 14007.29, 4223.68, 2299.21),
        "A100-SXM4-80GB": (5541.47, 4169.78, 2608.05, 3446.37, 3154.52, 649, 2056.58, 724.44, 337.51),
    },
    ("trtllm-perf-llama31-8b-h100-tp1-fp8-128-2048", 4, "mixtral-8x7b"): {
        "H100-SXM5-80GB": (41068.23, 41164.73, 27912.48, 34489.34, 27784.74, 5234.98, 19432.08, 6401.56, 3303.83),
        "H200-SXM-141GB": (42551.59, 52291.78, 39513.73, 43818.99, 33580.9, 5467.62, 24980.93, 7084.94, 4236.84),
        "L40S": (6921.87, 7996.93, 5736.09, 6914.68, 5251.49, 827.62, 3935.32, 1092.88, 682.48),
        "A100-SXM4-80GB": (10324.28, 10911.86, 7666.51, 8456.21, 7122.84, 1237.62, 5222.98, 1500.55, 829.59),
    },
    ("trtllm-perf-llama31-8b-h100-tp1-fp8-128-2048", 8, "mixtral-8x7b"): {
        "H100-SXM5-80GB": (50849.55, 61607.7, 48280.37, 52583.65, 40631.71, 6988.18, 30983.35, 9210.11, 5602.43),
        "H200-SXM-141GB": (53212.55, 68608.45, 54827.78, 58706.39, 44705.48, 7554.38, 36193.64, 10271.8, 6835.53),
        "L40S": (6740.84, 10393.3, 8472.35, 8660.71, 5947.72, 811.96, 5136.98, 1153.76, 918.95),
        "A100-SXM4-80GB": (17043.54, 20277.88, 15282.89, 17184.24, 12851.44, 2165.52, 9809.76, 2761.28, 1592.53),
    },
}
"""The v0.17 table, LLaMA v3.1 8B and 70B and Mixtral 8x7B rows. The A100 column is FP16, the others FP8 (the table's
precision row): an A100 row is priced in FP16 and compared with the H100's FP8 figure (the ratio then also checks the
format). The H200 column (a validated board) checks the same physics where only memory size and bandwidth differ."""
FORMAT = {"A100-SXM4-80GB": "fp16"}
"""Weight and KV format of a column other than FP8."""
MODELS = {"mixtral-8x7b": {"name": "mixtral-8x7b", "layers": 32, "hidden": 4096, "heads": 32, "kv_heads": 8,
                           "ffn": 14336, "vocab": 32000, "experts": 8, "top_k": 2, "ffn_act": "swiglu"}}
"""Models of the table that no corpus case holds, put into the template case in place of its own (Mixtral 8x7B:
mistralai/Mixtral-8x7B-v0.1 config.json; the engine's MoE layers run tensor-parallel, ep 1)."""
FRAMEWORK = "TensorRT-LLM 0.17"
"""The runtime every row of the table ran on."""
KV_FRACTION = {"GH200-96GB": 0.95}
"""A column's stated --kv_cache_free_gpu_mem_fraction (the table's GH200 command); the others ran trtllm-bench's
default, 0.90, or 0.95 'in majority of cases' (not stated per row)."""
NODE = {"GH200-96GB": 4, "L40S": 8, "H100-SXM5-80GB": 8, "A100-SXM4-80GB": 8, "H200-SXM-141GB": 8}
"""GPUs per node of each board's system (a quad GH200 node; the L40S PCIe server)."""


def predict(template: dict, gpu: str, tp: int, isl: int, osl: int, model: str | None = None,
            framework: str | None = None) -> float | str:
    """Predicted output tokens/s of the template case moved to `gpu` (in its column's format), tp, ISL/OSL, model and
    (when given) the framework its stack is read from (or why it failed)."""
    raw = copy.deepcopy(template)
    if framework:
        raw["plan"]["framework"] = framework
    if model:
        raw["model"] = dict(MODELS[model])
    raw["hardware"].update(gpu=gpu, num_gpus=tp, gpus_per_node=NODE[gpu])
    raw["plan"].update(tp=tp, weights_precision=FORMAT.get(gpu, "fp8"), kv_precision=FORMAT.get(gpu))
    if gpu in KV_FRACTION:
        raw["plan"]["kv_memory_fraction"] = KV_FRACTION[gpu]
    raw["workload"].update(input_tokens=isl, output_tokens=osl, num_requests=NREQ[(isl, osl)])
    raw["measured"] = {"output_tokens_per_s": 1.0, "percentile": "mean"}
    raw["id"] = f"{template['id']}@{gpu}/tp{tp}/{isl}-{osl}"
    case = run_case(raw, 0)
    return case.failure if case.failure else case.figures["output_tokens_per_s"].predicted


def main() -> int:
    corpus = {r["id"]: r for r in load_inference_corpus(corpus_args(__doc__).corpus)}
    by_board: dict[str, list[float]] = {}
    for (cid, tp, model), columns in TABLE.items():
        base = columns["H100-SXM5-80GB"]
        for gpu, measured in columns.items():
            if gpu == "H100-SXM5-80GB":
                continue
            for (isl, osl), m, b in zip(LENGTHS, measured, base):
                if m is None or b is None:
                    continue
                p_board = predict(corpus[cid], gpu, tp, isl, osl, model, FRAMEWORK)
                p_base = predict(corpus[cid], "H100-SXM5-80GB", tp, isl, osl, model, FRAMEWORK)
                if isinstance(p_board, str) or isinstance(p_base, str):
                    print(f"{gpu} tp{tp} {isl}/{osl}: FAILED: {p_board if isinstance(p_board, str) else p_base}")
                    continue
                ratio_m, ratio_p = m / b, p_board / p_base
                err = ratio_p / ratio_m - 1.0
                fmt = FORMAT.get(gpu, "fp8")
                by_board.setdefault(f"{gpu} {fmt} {model or 'llama'}", []).append(err)
                print(f"{gpu:15s} {model or 'llama':12s} {fmt} tp{tp} {isl:>5}/{osl:<5} ratio to H100: measured "
                      f"{ratio_m:5.3f} predicted {ratio_p:5.3f} ({err * 100:+6.1f} %)   board {p_board:9.0f} vs "
                      f"{m:9.0f} tok/s")
    summarise(by_board, "ratio error")
    return 0


def corpus_args(doc: str, rows: bool = False) -> argparse.Namespace:
    """The held-out scripts' command line: `--corpus` (the inference corpus their templates come from) and, where
    asked for, `--rows` (print every row)."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("--corpus", default=str(Path(__file__).resolve().parents[2] / "shared" / "validation"
                                            / "inference-public.yaml"))
    if rows:
        ap.add_argument("--rows", action="store_true", help="print every row")
    return ap.parse_args()


def summarise(groups: dict[str, list[float]], what: str) -> None:
    """Per group and over all rows: the mean |error|, the geometric-mean bias and the worst error."""
    for group, errs in groups.items():
        gmean = math.exp(sum(math.log1p(e) for e in errs) / len(errs)) - 1.0
        print(f"{group}: mean |{what}| {sum(abs(e) for e in errs) / len(errs) * 100:.1f} % over {len(errs)} rows "
              f"(geometric mean bias {gmean * 100:+.1f} %, worst {max(errs, key=abs) * 100:+.1f} %)")
    every = [abs(e) for errs in groups.values() for e in errs]
    print(f"all rows: mean |{what}| {sum(every) / len(every) * 100:.1f} % over {len(every)} rows")


if __name__ == "__main__":
    raise SystemExit(main())
