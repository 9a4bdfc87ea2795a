"""Held-out check of the `tensorrt-llm-0.1x` serving stack (TensorRT-LLM 0.10-0.21: in-flight batching on the C++
executor and TensorRT engines, catalog/serving_stacks.yaml) on every row of TensorRT-LLM's v0.17 'Performance
Overview' table that benchmarks/heldout_boards.py holds (H200, H100, GH200, L40S and A100 columns; Llama-3.1 8B and
70B, Mixtral 8x7B), as absolute output tokens/s: each row is the corpus template of heldout_boards moved to the row's
board, layout, format and lengths, with `plan.framework: TensorRT-LLM 0.17` as the table states (GH200 at the 0.95
KV fraction its command passes). The stack entry was
written from the documentation before this check first ran; nothing is fitted to it and `validate` does not read it.

    python benchmarks/heldout_trtllm017.py [--corpus ../shared/validation/inference-public.yaml] [--rows]
"""
from __future__ import annotations

from heldout_boards import FRAMEWORK, LENGTHS, TABLE, corpus_args, predict, summarise
from narrowpath.validate.inference import load_inference_corpus


def main() -> int:
    args = corpus_args(__doc__, rows=True)
    corpus = {r["id"]: r for r in load_inference_corpus(args.corpus)}
    groups: dict[str, list[float]] = {}
    for (cid, tp, model), columns in TABLE.items():
        for gpu, measured in columns.items():
            for (isl, osl), m in zip(LENGTHS, measured):
                if m is None:
                    continue
                p = predict(corpus[cid], gpu, tp, isl, osl, model, FRAMEWORK)
                if isinstance(p, str):
                    print(f"{gpu} {model or 'llama'} tp{tp} {isl}/{osl}: FAILED: {p}")
                    continue
                err = p / m - 1.0
                groups.setdefault(f"{gpu} {model or 'llama'}", []).append(err)
                if args.rows:
                    print(f"{gpu:15s} {model or 'llama':12s} tp{tp} {isl:>5}/{osl:<5} predicted {p:9.0f} measured "
                          f"{m:9.0f} ({err * 100:+6.1f} %)")
    summarise(groups, "error")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
