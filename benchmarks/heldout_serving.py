"""Held-out serving check: rows of TensorRT-LLM's v1.0 'Performance Overview' (github NVIDIA/TensorRT-LLM
docs/source/performance/perf-overview.md @00f37686, trtllm-bench throughput, PyTorch backend) that the public
inference corpus does not hold. Each row is built from the corpus case of the same model, GPU and layout with only
the ISL/OSL and the request count of the table's reproduction section changed, and predicted without looking at the
measurement. Not part of `validate` and not used to fit anything: it shows whether a change to the serving physics
helps on runs it was not looked at on.

    python benchmarks/heldout_serving.py [--corpus ../shared/validation/inference-public.yaml]
"""
from __future__ import annotations

import argparse
import copy
from pathlib import Path

from narrowpath.validate.inference import load_inference_corpus, run_case

NREQ = {  # the table's $num_requests per ISL/OSL
    (128, 128): 30000, (128, 2048): 3000, (128, 4096): 1500, (1000, 2000): 1500, (2048, 128): 3000,
    (2048, 2048): 1500, (5000, 500): 1500, (1000, 1000): 3000, (500, 2000): 3000, (20000, 2000): 1000}
ROWS = {  # corpus case used as the template: {(ISL, OSL): measured output tok/s}
    "trtllm-perf-llama31-8b-h100-tp1-fp8-128-2048":
        {(128, 128): 28312, (1000, 1000): 15220, (500, 2000): 17660, (2048, 2048): 9305, (128, 4096): 14325},
    "trtllm-perf-llama31-8b-h200-tp1-fp8-128-2048":
        {(128, 128): 27911, (1000, 1000): 17744, (500, 2000): 20770, (2048, 2048): 12194, (128, 4096): 18027},
    "trtllm-perf-qwen3-30b-b200-tp1-fp4-1000-1000":
        {(128, 128): 39827, (128, 2048): 37844, (500, 2000): 27817, (2048, 2048): 17554, (2048, 128): 6251},
    "trtllm-perf-llama33-70b-h200-tp1-fp8-1000-1000":
        {(128, 128): 3803, (128, 2048): 4336, (2048, 2048): 2003, (500, 2000): 3666},
    "trtllm-perf-llama33-70b-h100-tp2-fp8-128-2048": {(128, 128): 6378, (1000, 1000): 4205, (2048, 2048): 3082},
    "trtllm-perf-llama33-70b-b200-tp1-fp4-128-2048": {(128, 128): 11147, (1000, 1000): 7007, (2048, 2048): 4783},
    "trtllm-perf-llama31-405b-h100-tp8-fp8-128-2048": {(128, 128): 3627, (1000, 1000): 2919, (2048, 2048): 2296},
    "trtllm-perf-qwen3-235b-h200-tp8-fp8-1000-1000": {(128, 128): 30429, (128, 2048): 42821, (2048, 2048): 16672},
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", default=str(Path(__file__).resolve().parents[2] / "shared" / "validation"
                                            / "inference-public.yaml"))
    corpus = {r["id"]: r for r in load_inference_corpus(ap.parse_args().corpus)}
    errors = []
    for cid, table in ROWS.items():
        for (isl, osl), measured in table.items():
            raw = copy.deepcopy(corpus[cid])
            raw["workload"].update(input_tokens=isl, output_tokens=osl, num_requests=NREQ[(isl, osl)])
            raw["measured"] = {"output_tokens_per_s": measured, "percentile": "mean"}
            raw["id"] = f"{cid}@{isl}/{osl}"
            case = run_case(raw, 0)
            if case.failure:
                print(raw["id"], "FAILED:", case.failure)
                continue
            fig = case.figures["output_tokens_per_s"]
            errors.append(abs(fig.error))
            print(f"{raw['id'][:62]:62s} predicted {fig.predicted:9.0f}  measured {measured:7d}  "
                  f"{fig.error * 100:+6.1f} %")
    print(f"mean |error| {sum(errors) / len(errors) * 100:.1f} % over {len(errors)} rows")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
