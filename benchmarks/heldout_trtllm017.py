"""Held-out check of the `tensorrt-llm-0.1x` serving stack (TensorRT-LLM 0.10-0.21: in-flight batching on the C++
executor and TensorRT engines, catalog/serving_stacks.yaml) on every row of TensorRT-LLM's v0.17 'Performance
Overview' table that benchmarks/heldout_boards.py holds (H200, H100, GH200, L40S and A100 columns; Llama-3.1 8B and
70B, Mixtral 8x7B), as absolute output tokens/s: each row is the corpus template of heldout_boards moved to the row's
board, layout, format and lengths, with `plan.framework: TensorRT-LLM 0.17` as the table states (GH200 at the 0.95
KV fraction its command passes). The stack entry was
written from the documentation before this check first ran; nothing is fitted to it and `validate` does not read it.

It also checks how the model *ranks* serving layouts, as `search --serve` does (throughput per GPU): rows of one
model, board and ISL/OSL at different tensor-parallel sizes (Llama-3.3 70B at tp 1-8, Mixtral 8x7B at tp 1-8) are a
sweep whose cost is GPU-seconds per output token (tp / output tokens/s); pairwise order agreement over the pairs
whose measured costs differ by more than 3 % and the top-1 regret are those of validate.ranking (training's sweeps).

    python benchmarks/heldout_trtllm017.py [--corpus ../shared/validation/inference-public.yaml] [--rows]
"""
from __future__ import annotations

from heldout_boards import FRAMEWORK, LENGTHS, TABLE, corpus_args, predict, summarise
from narrowpath.validate.inference import load_inference_corpus
from narrowpath.validate.ranking import order_agreement, top1_regret

MODEL_OF = {"trtllm-perf-llama31-8b-h100-tp1-fp8-128-2048": "llama-3.1-8b",
            "trtllm-perf-llama33-70b-h200-tp1-fp8-1000-1000": "llama-3.3-70b",
            "trtllm-perf-llama33-70b-h100-tp2-fp8-128-2048": "llama-3.3-70b"}
"""The model a template case of TABLE holds (when TABLE puts no other model in its place)."""


def ranking(rows: list[tuple[str, str, int, int, int, float, float]]) -> dict:
    """Order agreement and top-1 regret of the layouts of each (model, board, ISL, OSL) sweep; `rows` are (model,
    board, isl, osl, tp, predicted, measured output tokens/s). A layout's cost is tp / tokens/s (GPU-seconds per
    output token: lower is better, as a step time is)."""
    sweeps: dict[tuple, list[tuple[int, float, float]]] = {}
    for model, gpu, isl, osl, tp, pred, meas in rows:
        sweeps.setdefault((model, gpu, isl, osl), []).append((tp, tp / pred, tp / meas))
    pairs = agreeing = 0
    regrets, disagreeing = [], []
    for key, layouts in sorted(sweeps.items()):
        if len(layouts) < 2:
            continue
        pred, meas = [c for _, c, _ in layouts], [c for _, _, c in layouts]
        a, c = order_agreement(pred, meas)
        agreeing, pairs = agreeing + a, pairs + c
        regrets.append(top1_regret(pred, meas))
        for i, (tp_i, p_i, m_i) in enumerate(layouts):
            for tp_j, p_j, m_j in layouts[i + 1:]:
                if abs(m_i - m_j) > 0.03 * min(m_i, m_j) and (p_i - p_j) * (m_i - m_j) <= 0:
                    disagreeing.append((key, tp_i, tp_j))
    return {"sweeps": len(regrets), "pairs": pairs, "order_agreement": agreeing / pairs if pairs else None,
            "top1_regret_mean": sum(regrets) / len(regrets) if regrets else None,
            "top1_regret_max": max(regrets) if regrets else None, "disagreeing": disagreeing}


def main() -> int:
    args = corpus_args(__doc__, rows=True)
    corpus = {r["id"]: r for r in load_inference_corpus(args.corpus)}
    groups: dict[str, list[float]] = {}
    rows = []
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
                rows.append((model or MODEL_OF[cid], gpu, isl, osl, tp, p, m))
                groups.setdefault(f"{gpu} {model or 'llama'}", []).append(err)
                if args.rows:
                    print(f"{gpu:15s} {model or 'llama':12s} tp{tp} {isl:>5}/{osl:<5} predicted {p:9.0f} measured "
                          f"{m:9.0f} ({err * 100:+6.1f} %)")
    summarise(groups, "error")
    r = ranking(rows)
    print(f"ranking of layouts (tokens/s per GPU): {r['sweeps']} sweeps, {r['pairs']} pairs apart by > 3 %, order "
          f"agreement {r['order_agreement'] * 100:.1f} %, top-1 regret mean {r['top1_regret_mean'] * 100:.2f} % / "
          f"worst {r['top1_regret_max'] * 100:.1f} %")
    for (model, gpu, isl, osl), a, b in r["disagreeing"]:
        print(f"  ordered the other way: {model} on {gpu} {isl}/{osl}, tp {a} vs tp {b}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
